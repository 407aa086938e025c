//===- OutlineParallel.cpp - run outer parallel loops on a thread pool ----===//
//
// Each outermost scf.parallel (no reductions) with enough work is outlined
// into a body function `(ctx, lo, hi)` that runs iterations [lo, hi) of its
// outer dims (linearized), and replaced by a call to the runtime's
// `mlircap_parallel_for(body, ctx, 0, n, grain)`. Values the loop uses are
// stored in a stack struct (memrefs as their LLVM descriptors) that `ctx`
// points to; the body loads them and calls `<fn>_parallel_body(values...,
// lo, hi)`, whose memref arguments are noalias in a kernel. Inner dims stay
// sequential loops, for LLVM's vectorizer.
//
// Before that, in a kernel, each parallel loop is fused into the next one
// over the same iteration space where that keeps every access order (see
// fuseParallelLoops): a LayerNorm's or softmax's statistics loops and the
// elementwise loop using them become one loop over rows, one dispatch.
// See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "CascadeSums.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SmallBitVector.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPOUTLINEPARALLEL
#include "mlircap/Passes.h.inc"

namespace {
constexpr llvm::StringLiteral kRuntimeFn = "mlircap_parallel_for";

/// Static trip count of one loop dim, if its bounds are constants.
std::optional<int64_t> tripCount(Value lb, Value ub, Value step) {
  auto l = getConstantIntValue(lb), u = getConstantIntValue(ub),
       s = getConstantIntValue(step);
  if (!l || !u || !s || *s <= 0)
    return std::nullopt;
  return *u <= *l ? 0 : llvm::divideCeil(*u - *l, *s);
}

/// Iterations of the innermost bodies per execution of `block`: the static
/// trip counts of the loops nested in it (a loop whose bounds are not
/// constants counts as one iteration; both sides of an scf.if are added).
int64_t innerWork(Block &block) {
  int64_t work = 0;
  for (Operation &op : block) {
    // Elements a cascade sum computes outside its loops (CascadeSums.h).
    if (auto w = op.getAttrOfType<IntegerAttr>(kWorkAttr))
      work += w.getInt();
    if (op.getNumRegions() == 0)
      continue;
    int64_t trips = 1;
    if (auto f = dyn_cast<scf::ForOp>(op)) {
      trips = tripCount(f.getLowerBound(), f.getUpperBound(), f.getStep()).value_or(1);
      if (auto lanes = f->getAttrOfType<IntegerAttr>(kLanesAttr)) // an iteration per vector
        trips *= lanes.getInt();
    } else if (auto p = dyn_cast<scf::ParallelOp>(op)) {
      for (auto [l, u, s] : llvm::zip(p.getLowerBound(), p.getUpperBound(), p.getStep()))
        trips *= tripCount(l, u, s).value_or(1);
    }
    int64_t nested = 0;
    for (Region &r : op.getRegions())
      for (Block &b : r)
        nested += innerWork(b);
    work += trips * nested;
  }
  return std::max<int64_t>(work, 1);
}

/// True if the iterations of `loop` touch disjoint memory whatever the
/// iteration of the loops around it: every memref the body writes is
/// defined outside `root` and accessed only through one index list that
/// holds every induction variable of `loop`; the body has no other writes.
/// Then sequential loops between `root` and `loop` can move into each
/// thread's chunk (a column reduction: `for r { parallel c }` runs
/// `for r { for c in chunk }` on each thread).
bool independentAcrossOuterLoops(scf::ParallelOp loop, Operation *root) {
  llvm::DenseMap<Value, SmallVector<Value>> indexOf;
  bool ok = true;
  auto access = [&](Value memref, ValueRange indices, bool write) {
    auto it = indexOf.find(memref);
    if (it == indexOf.end()) {
      if (write)
        indexOf[memref] = llvm::to_vector(indices);
      return;
    }
    if (!llvm::equal(it->second, indices))
      ok = false;
  };
  // Stores first (they define each written memref's index list), then loads.
  loop.getBody()->walk([&](Operation *op) {
    if (auto store = dyn_cast<memref::StoreOp>(op)) {
      if (root->isAncestor(store.getMemRef().getParentBlock()->getParentOp()))
        ok = false;
      access(store.getMemRef(), store.getIndices(), true);
      for (Value iv : loop.getInductionVars())
        if (!llvm::is_contained(store.getIndices(), iv))
          ok = false;
    } else if (!isa<memref::LoadOp>(op) && !isMemoryEffectFree(op) &&
               !op->hasTrait<OpTrait::HasRecursiveMemoryEffects>()) {
      auto effects = dyn_cast<MemoryEffectOpInterface>(op);
      if (!effects || effects.hasEffect<MemoryEffects::Write>() ||
          effects.hasEffect<MemoryEffects::Free>())
        ok = false;
    }
  });
  loop.getBody()->walk([&](memref::LoadOp load) {
    access(load.getMemRef(), load.getIndices(), false);
  });
  return ok;
}

/// The sequential loops around `loop` that can run inside each chunk:
/// scf.for ops without iter_args holding nothing else, outermost first.
SmallVector<scf::ForOp> hoistableForLoops(scf::ParallelOp loop) {
  SmallVector<scf::ForOp> fors;
  Operation *inner = loop;
  while (auto f = dyn_cast<scf::ForOp>(inner->getParentOp())) {
    if (f.getNumRegionIterArgs() != 0 || f.getBody()->getOperations().size() != 2)
      break;
    fors.insert(fors.begin(), f);
    inner = f;
  }
  while (!fors.empty()) {
    Operation *root = fors.front();
    // The parallel loop's bounds must not depend on the moved loops.
    bool invariant = llvm::all_of(
        llvm::concat<Value>(loop.getLowerBound(), loop.getUpperBound(), loop.getStep()),
        [&](Value v) { return !root->isAncestor(v.getParentBlock()->getParentOp()); });
    if (invariant && independentAcrossOuterLoops(loop, root))
      break;
    fors.erase(fors.begin());
  }
  return fors;
}

/// The buffer a memref value views (through subviews, casts, reshapes).
Value rootBuffer(Value v) {
  while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
    v = view.getViewSource();
  return v;
}

/// For each captured value of a loop in `parent`: whether it can be a
/// noalias argument of the outlined body. Only in a kernel (its memref
/// arguments are distinct buffers, see KernelNoAlias.cpp), only memrefs that
/// are one of them or an allocation of the kernel, only where no other
/// captured value views the same buffer, and only where every captured
/// memref is such a view or a global.
SmallVector<bool> noAliasCaptures(func::FuncOp parent, ArrayRef<Value> captured) {
  SmallVector<bool> out(captured.size(), false);
  if (!parent->hasAttr("mlircap.kernel"))
    return out;
  SmallVector<Value> roots;
  llvm::DenseMap<Value, int> count;
  for (Value v : captured) {
    roots.push_back(isa<MemRefType>(v.getType()) ? rootBuffer(v) : Value());
    if (roots.back())
      ++count[roots.back()];
  }
  auto markable = [&](Value r) {
    auto arg = dyn_cast<BlockArgument>(r);
    return (arg && arg.getOwner() == &parent.getBody().front()) ||
           r.getDefiningOp<memref::AllocOp>() || r.getDefiningOp<memref::AllocaOp>();
  };
  // A global is storage of its own (not marked: two get_global of one symbol
  // are one buffer); a memref of another origin (an op that is no view but
  // may return one) could alias any of them: then none is marked.
  if (llvm::any_of(roots, [&](Value r) {
        return r && !markable(r) && !r.getDefiningOp<memref::GetGlobalOp>();
      }))
    return out;
  for (auto [i, r] : llvm::enumerate(roots))
    out[i] = r && markable(r) && count[r] == 1;
  return out;
}

//===----------------------------------------------------------------------===//
// Fusion of a kernel's parallel loops over one iteration space
//===----------------------------------------------------------------------===//

/// A buffer a kernel can name: an argument of the kernel (distinct buffers,
/// see KernelNoAlias.cpp), an allocation, or a global (by symbol: two
/// get_global of one symbol are one buffer); null for any other origin.
const void *bufferKey(Value root, func::FuncOp kernel) {
  if (auto arg = dyn_cast<BlockArgument>(root))
    return arg.getOwner() == &kernel.getBody().front() ? root.getAsOpaquePointer() : nullptr;
  if (root.getDefiningOp<memref::AllocOp>() || root.getDefiningOp<memref::AllocaOp>())
    return root.getAsOpaquePointer();
  if (auto g = root.getDefiningOp<memref::GetGlobalOp>())
    return g.getNameAttr().getAsOpaquePointer();
  return nullptr;
}

/// The memory accesses of one op (a parallel loop, or an op between two):
/// per buffer, the loads and stores (memref and indices) and whether any
/// access is of the whole buffer (a copy, a fill) or a write.
struct Footprint {
  struct Access {
    Value memref;
    ValueRange indices;
  };
  struct Buffer {
    SmallVector<Access> accesses;
    bool read = false, written = false, whole = false;
  };
  llvm::DenseMap<const void *, Buffer> buffers;
  bool unknown = false; // an effect on something we cannot name

  Footprint(Operation *op, func::FuncOp kernel) {
    auto touch = [&](Value memref, bool write) -> Buffer * {
      Value root = rootBuffer(memref);
      // Storage allocated inside `op` (a stack tile) is private to it.
      if (Operation *def = root.getDefiningOp(); def && op->isAncestor(def))
        return nullptr;
      const void *key = bufferKey(root, kernel);
      if (!key) {
        unknown = true;
        return nullptr;
      }
      Buffer &b = buffers[key];
      (write ? b.written : b.read) = true;
      return &b;
    };
    op->walk([&](Operation *o) {
      if (auto load = dyn_cast<memref::LoadOp>(o)) {
        if (Buffer *b = touch(load.getMemRef(), false))
          b->accesses.push_back({load.getMemRef(), load.getIndices()});
        return;
      }
      if (auto store = dyn_cast<memref::StoreOp>(o)) {
        if (Buffer *b = touch(store.getMemRef(), true))
          b->accesses.push_back({store.getMemRef(), store.getIndices()});
        return;
      }
      if (o->hasTrait<OpTrait::HasRecursiveMemoryEffects>() || isMemoryEffectFree(o))
        return;
      auto iface = dyn_cast<MemoryEffectOpInterface>(o);
      if (!iface) {
        unknown = true;
        return;
      }
      SmallVector<MemoryEffects::EffectInstance> effects;
      iface.getEffects(effects);
      for (auto &e : effects) {
        if (isa<MemoryEffects::Allocate>(e.getEffect()))
          continue; // a new buffer: nothing else can be accessing it yet
        Value v = e.getValue();
        if (!v || !isa<BaseMemRefType>(v.getType())) {
          unknown = true;
          continue;
        }
        if (Buffer *b = touch(v, !isa<MemoryEffects::Read>(e.getEffect())))
          b->whole = true;
      }
    });
  }

  /// True if neither op writes a buffer the other one accesses.
  bool independentOf(const Footprint &other) const {
    if (unknown || other.unknown)
      return false;
    for (auto &[key, b] : buffers) {
      auto it = other.buffers.find(key);
      if (it != other.buffers.end() && (b.written || it->second.written))
        return false;
    }
    return true;
  }
};

/// True if iteration `ivs` of a loop touches only elements of `b` whose
/// coordinate at position p[d] is ivs[d], for one p common to all accesses
/// of both loops: then each iteration of a fused loop touches elements no
/// other iteration does, in the order the two loops touched them.
bool rowLocal(const Footprint::Buffer &x, ValueRange xIvs, const Footprint::Buffer &y,
              ValueRange yIvs) {
  if (x.whole || y.whole || x.accesses.empty())
    return false;
  Value memref = x.accesses.front().memref;
  SmallVector<llvm::SmallBitVector> positions; // per iv, candidate positions
  for (unsigned d = 0; d < xIvs.size(); ++d)
    positions.emplace_back(cast<MemRefType>(memref.getType()).getRank(), true);
  auto check = [&](const Footprint::Buffer &b, ValueRange ivs) {
    for (auto &a : b.accesses) {
      if (a.memref != memref) // one view, so one coordinate system
        return false;
      for (auto [d, iv] : llvm::enumerate(ivs))
        for (auto [p, index] : llvm::enumerate(a.indices))
          if (index != iv)
            positions[d].reset(p);
    }
    return true;
  };
  return check(x, xIvs) && check(y, yIvs) &&
         llvm::all_of(positions, [](auto &p) { return p.any(); });
}

bool sameIterationSpace(scf::ParallelOp a, scf::ParallelOp b) {
  return llvm::equal(a.getLowerBound(), b.getLowerBound()) &&
         llvm::equal(a.getUpperBound(), b.getUpperBound()) &&
         llvm::equal(a.getStep(), b.getStep());
}

/// Fuses `first` into `second` (its body runs first in each iteration) when
/// that keeps every access order: the ops between them are independent of
/// `first` (it moves down past them), and each buffer one loop writes and
/// the other accesses is accessed row-locally by both.
bool fuseInto(scf::ParallelOp first, scf::ParallelOp second, func::FuncOp kernel) {
  if (first.getNumResults() || second.getNumResults() || !sameIterationSpace(first, second))
    return false;
  Footprint f(first, kernel);
  if (f.unknown)
    return false;
  for (Operation *op = first->getNextNode(); op != second; op = op->getNextNode())
    if (!isMemoryEffectFree(op) && !Footprint(op, kernel).independentOf(f))
      return false;
  Footprint s(second, kernel);
  if (s.unknown)
    return false;
  for (auto &[key, fb] : f.buffers) {
    auto it = s.buffers.find(key);
    if (it == s.buffers.end() || !(fb.written || it->second.written))
      continue;
    if (!rowLocal(fb, first.getInductionVars(), it->second, second.getInductionVars()))
      return false;
  }
  Block *to = second.getBody();
  to->getOperations().splice(to->begin(), first.getBody()->getOperations(),
                             first.getBody()->begin(), std::prev(first.getBody()->end()));
  for (auto [a, b] : llvm::zip(first.getInductionVars(), second.getInductionVars()))
    a.replaceAllUsesWith(b);
  first->erase();
  return true;
}

/// Fuses the parallel loops of a kernel's body over one iteration space
/// (a row reduction's statistics, and the elementwise loop using them) into
/// one loop, each loop into the next one it can join: a LayerNorm or softmax
/// reads each row once from memory and keeps it in cache for the next
/// steps, and the kernel dispatches one parallel loop instead of three.
void fuseParallelLoops(func::FuncOp kernel) {
  SmallVector<scf::ParallelOp> loops(kernel.getBody().front().getOps<scf::ParallelOp>());
  for (auto [i, first] : llvm::enumerate(loops)) {
    for (scf::ParallelOp second : ArrayRef(loops).drop_front(i + 1)) {
      if (!second || !sameIterationSpace(first, second))
        continue;
      if (fuseInto(first, second, kernel))
        loops[i] = nullptr;
      break;
    }
  }
}

struct OutlineParallel : impl::MlircapOutlineParallelBase<OutlineParallel> {
  using MlircapOutlineParallelBase::MlircapOutlineParallelBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr("mlircap.kernel") && !func.isExternal())
        fuseParallelLoops(func);
    SmallVector<scf::ParallelOp> loops;
    module.walk([&](scf::ParallelOp op) {
      if (op.getNumReductions() == 0 && !op->getParentOfType<scf::ParallelOp>() &&
          op->getParentOfType<func::FuncOp>())
        loops.push_back(op);
    });
    if (loops.empty())
      return;
    SymbolTable symbols(module);
    LLVMTypeConverter converter(module.getContext());
    for (scf::ParallelOp loop : loops)
      outline(loop, symbols, converter);
  }

  func::FuncOp runtimeDecl(SymbolTable &symbols) {
    if (auto f = symbols.lookup<func::FuncOp>(kRuntimeFn))
      return f;
    MLIRContext *ctx = &getContext();
    auto ptr = LLVM::LLVMPointerType::get(ctx);
    auto i64 = IntegerType::get(ctx, 64);
    auto bodyType = FunctionType::get(ctx, {ptr, i64, i64}, {});
    OpBuilder b(ctx);
    auto decl = func::FuncOp::create(b, UnknownLoc::get(ctx), kRuntimeFn,
                                     FunctionType::get(ctx, {bodyType, ptr, i64, i64, i64}, {}));
    decl.setPrivate();
    symbols.insert(decl);
    return decl;
  }

  void outline(scf::ParallelOp loop, SymbolTable &symbols, LLVMTypeConverter &converter) {
    MLIRContext *ctx = &getContext();
    Location loc = loop.getLoc();
    unsigned rank = loop.getNumLoops();
    SmallVector<std::optional<int64_t>> trips;
    for (auto [l, u, s] : llvm::zip(loop.getLowerBound(), loop.getUpperBound(), loop.getStep()))
      trips.push_back(tripCount(l, u, s));
    SmallVector<scf::ForOp> fors = hoistableForLoops(loop);
    Operation *root = fors.empty() ? loop.getOperation() : fors.front().getOperation();
    std::optional<int64_t> forTrips = 1;
    for (scf::ForOp f : fors) {
      auto t = tripCount(f.getLowerBound(), f.getUpperBound(), f.getStep());
      forTrips = t && forTrips ? std::optional<int64_t>(*t * *forTrips) : std::nullopt;
    }
    bool allStatic = forTrips && llvm::all_of(trips, [](auto t) { return t.has_value(); });
    int64_t inner = innerWork(*loop.getBody());
    auto product = [&](unsigned from, unsigned to) -> std::optional<int64_t> {
      int64_t p = 1;
      for (unsigned d = from; d < to; ++d) {
        if (!trips[d])
          return std::nullopt;
        p *= *trips[d];
      }
      return p;
    };
    if (allStatic && *forTrips * *product(0, rank) * inner < 2 * minWork)
      return; // too little work for a second thread
    // Dispatched dims: all but the last when the last is a straight-line
    // loop long enough to vectorize and the others give some parallelism;
    // else all of them (linearized).
    unsigned dispatched = rank;
    if (rank > 1 && inner == 1 && trips.back() && *trips.back() >= 16) {
      auto outer = product(0, rank - 1);
      if (!outer || *outer >= 4)
        dispatched = rank - 1;
    }
    // Linearized with a last dim that would vectorize (a [2, 1, 262144] broadcast,
    // whose outer dims give too little parallelism to dispatch them alone): each
    // chunk runs its rows, each row's part of the chunk an inner loop, instead of
    // recovering every index from the linear one per element (a scalar loop,
    // 2.4x eager's time on a [2, 737280] broadcast copy).
    bool rowsOfLast = dispatched == rank && rank > 1 && inner == 1 && trips.back() &&
                      *trips.back() >= 16;
    std::optional<int64_t> rest = product(dispatched, rank);
    int64_t perIteration = inner * rest.value_or(1) * forTrips.value_or(1);
    int64_t grain = std::max<int64_t>(1, llvm::divideCeil(minWork, perIteration));

    // What the body needs from the parent: constants are cloned, memrefs
    // travel as LLVM descriptors, indices as i64, other scalars as they are.
    llvm::SetVector<Value> used;
    for (Region &r : root->getRegions())
      getUsedValuesDefinedAbove(r, used);
    for (Value v : root->getOperands())
      used.insert(v);
    for (Value v : llvm::concat<Value>(loop.getLowerBound(), loop.getUpperBound(), loop.getStep()))
      used.insert(v);
    SmallVector<Value> constants, captured;
    SmallVector<Type> fieldTypes;
    for (Value v : used) {
      Operation *def = v.getDefiningOp();
      if (def && def->getNumOperands() == 0 && def->getNumRegions() == 0 &&
          def->hasTrait<OpTrait::ConstantLike>()) {
        constants.push_back(v);
        continue;
      }
      Type t = v.getType();
      Type field;
      if (isa<MemRefType>(t))
        field = converter.convertType(t);
      else if (t.isIndex())
        field = IntegerType::get(ctx, 64);
      else if (LLVM::isCompatibleType(t))
        field = t;
      if (!field || !LLVM::isCompatibleType(field))
        return; // a value we cannot pass through memory: stays sequential
      captured.push_back(v);
      fieldTypes.push_back(field);
    }

    auto parent = loop->getParentOfType<func::FuncOp>();
    auto ptr = LLVM::LLVMPointerType::get(ctx);
    auto i64 = IntegerType::get(ctx, 64);
    auto structType = LLVM::LLVMStructType::getLiteral(ctx, fieldTypes);

    // The body: `<parent>_parallel_body(captured..., lo, hi)` runs the
    // chunk; the entry point `<parent>_parallel(ctx, lo, hi)` loads the
    // captured values from the context and calls it. A kernel's memrefs are
    // distinct buffers, and a captured memref that is one of them (no other
    // captured value is a view of the same buffer) is an argument marked
    // `mlircap.noalias` there (mlircap-mark-noalias), so its data pointer is
    // an llvm.noalias argument: loads from the context alone lose the fact
    // (the loops vectorized behind runtime alias checks, per-channel values
    // were not hoisted). Where LLVM inlines the body it keeps the fact as
    // alias-scope metadata.
    auto kernelNoAlias = noAliasCaptures(parent, captured);
    OpBuilder b(ctx);
    b.setInsertionPoint(parent);
    SmallVector<Type> innerTypes = llvm::map_to_vector(captured, [](Value v) { return v.getType(); });
    innerTypes.append({i64, i64});
    auto chunkFn = func::FuncOp::create(b, loc, (parent.getSymName() + "_parallel_body").str(),
                                        FunctionType::get(ctx, innerTypes, {}));
    chunkFn.setPrivate();
    symbols.insert(chunkFn); // renames on a clash
    if (llvm::any_of(kernelNoAlias, [](bool m) { return m; })) {
      chunkFn->setAttr("mlircap.noalias", UnitAttr::get(ctx));
      for (auto [i, m] : llvm::enumerate(kernelNoAlias))
        if (m)
          chunkFn.setArgAttr(i, "mlircap.noalias", UnitAttr::get(ctx));
    }
    b.setInsertionPoint(parent);
    auto body = func::FuncOp::create(b, loc, (parent.getSymName() + "_parallel").str(),
                                     FunctionType::get(ctx, {ptr, i64, i64}, {}));
    body.setPrivate();
    symbols.insert(body);
    {
      Block *outer = body.addEntryBlock();
      OpBuilder ob = OpBuilder::atBlockBegin(outer);
      SmallVector<Value> operands;
      for (auto [i, v] : llvm::enumerate(captured)) {
        Value addr = LLVM::GEPOp::create(ob, loc, ptr, structType, outer->getArgument(0),
                                         ArrayRef<LLVM::GEPArg>{0, static_cast<int32_t>(i)});
        Value field = LLVM::LoadOp::create(ob, loc, fieldTypes[i], addr);
        Type t = v.getType();
        if (isa<MemRefType>(t))
          field = UnrealizedConversionCastOp::create(ob, loc, t, field).getResult(0);
        else if (t.isIndex())
          field = arith::IndexCastOp::create(ob, loc, t, field);
        operands.push_back(field);
      }
      operands.append({outer->getArgument(1), outer->getArgument(2)});
      func::CallOp::create(ob, loc, chunkFn, operands);
      func::ReturnOp::create(ob, loc);
    }
    Block *entry = chunkFn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    IRMapping map;
    for (Value c : constants)
      map.map(c, b.clone(*c.getDefiningOp())->getResult(0));
    for (auto [i, v] : llvm::enumerate(captured))
      map.map(v, entry->getArgument(i));
    unsigned loArg = captured.size();
    auto lookup = [&](ValueRange vs) {
      return llvm::map_to_vector(vs, [&](Value v) { return map.lookupOrDefault(v); });
    };
    SmallVector<Value> lbs = lookup(loop.getLowerBound()), ubs = lookup(loop.getUpperBound()),
                       steps = lookup(loop.getStep());
    // Trip counts of the dispatched dims, in the body and in the parent.
    auto tripValues = [&](OpBuilder &ob, ValueRange l, ValueRange u, ValueRange s) {
      SmallVector<Value> out;
      for (unsigned d = 0; d < dispatched; ++d) {
        if (trips[d]) {
          out.push_back(arith::ConstantIndexOp::create(ob, loc, *trips[d]));
          continue;
        }
        Value zero = arith::ConstantIndexOp::create(ob, loc, 0);
        Value span = arith::SubIOp::create(ob, loc, u[d], l[d]);
        span = arith::MaxSIOp::create(ob, loc, span, zero);
        out.push_back(arith::CeilDivSIOp::create(ob, loc, span, s[d]));
      }
      return out;
    };
    SmallVector<Value> bodyTrips = tripValues(b, lbs, ubs, steps);
    Value lo = arith::IndexCastOp::create(b, loc, b.getIndexType(), entry->getArgument(loArg));
    Value hi = arith::IndexCastOp::create(b, loc, b.getIndexType(), entry->getArgument(loArg + 1));
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    func::ReturnOp::create(b, loc);
    b.setInsertionPoint(entry->getTerminator());
    for (scf::ForOp f : fors) {
      auto moved = scf::ForOp::create(b, f.getLoc(), map.lookupOrDefault(f.getLowerBound()),
                                      map.lookupOrDefault(f.getUpperBound()),
                                      map.lookupOrDefault(f.getStep()));
      map.map(f.getInductionVar(), moved.getInductionVar());
      b.setInsertionPointToStart(moved.getBody());
    }
    unsigned delinearized = rowsOfLast ? rank - 1 : dispatched;
    Value rowLo, rowHi, rowLen;
    if (rowsOfLast) {
      // rows lo / N .. ceil(hi / N), each over [max(lo - row * N, 0), min(hi - row * N, N))
      rowLen = bodyTrips[rank - 1];
      rowLo = arith::DivUIOp::create(b, loc, lo, rowLen);
      rowHi = arith::CeilDivUIOp::create(b, loc, hi, rowLen);
    }
    auto forOp = rowsOfLast ? scf::ForOp::create(b, loc, rowLo, rowHi, one)
                            : scf::ForOp::create(b, loc, lo, hi, one);
    b.setInsertionPointToStart(forOp.getBody());
    // Delinearize the linear index (outer dim slowest) into the loop's IVs.
    Value rem = forOp.getInductionVar();
    SmallVector<Value> ivs(dispatched);
    for (int d = delinearized - 1; d >= 0; --d) {
      Value idx = rem;
      if (d > 0) {
        idx = arith::RemUIOp::create(b, loc, rem, bodyTrips[d]);
        rem = arith::DivUIOp::create(b, loc, rem, bodyTrips[d]);
      }
      Value scaled = b.createOrFold<arith::MulIOp>(loc, idx, steps[d]);
      ivs[d] = b.createOrFold<arith::AddIOp>(loc, lbs[d], scaled);
    }
    for (unsigned d = 0; d < delinearized; ++d)
      map.map(loop.getInductionVars()[d], ivs[d]);
    auto cloneBody = [&](OpBuilder &ob) {
      for (Operation &op : loop.getBody()->without_terminator())
        ob.clone(op, map);
    };
    if (rowsOfLast) {
      Value start = arith::MulIOp::create(b, loc, forOp.getInductionVar(), rowLen);
      Value zero = arith::ConstantIndexOp::create(b, loc, 0);
      Value c0 = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, lo, start), zero);
      Value c1 = arith::MinSIOp::create(b, loc, arith::SubIOp::create(b, loc, hi, start), rowLen);
      scf::ParallelOp::create(b, loc, ValueRange{c0}, ValueRange{c1}, ValueRange{one},
                              [&](OpBuilder &ob, Location, ValueRange c) {
                                Value scaled = ob.createOrFold<arith::MulIOp>(loc, c[0], steps[rank - 1]);
                                map.map(loop.getInductionVars()[rank - 1],
                                        ob.createOrFold<arith::AddIOp>(loc, lbs[rank - 1], scaled));
                                cloneBody(ob);
                              });
    } else if (dispatched == rank) {
      cloneBody(b);
    } else {
      scf::ParallelOp::create(
          b, loc, ArrayRef(lbs).drop_front(dispatched), ArrayRef(ubs).drop_front(dispatched),
          ArrayRef(steps).drop_front(dispatched), [&](OpBuilder &ob, Location, ValueRange rest) {
            for (unsigned d = dispatched; d < rank; ++d)
              map.map(loop.getInductionVars()[d], rest[d - dispatched]);
            cloneBody(ob);
          });
    }

    // The parent: fill the context (on the stack, allocated once at entry)
    // and call the runtime.
    func::FuncOp runtime = runtimeDecl(symbols);
    b.setInsertionPointToStart(&parent.getBody().front());
    Value ctxPtr;
    if (captured.empty()) {
      ctxPtr = LLVM::ZeroOp::create(b, loc, ptr);
    } else {
      Value count = LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(1));
      ctxPtr = LLVM::AllocaOp::create(b, loc, ptr, structType, count);
    }
    b.setInsertionPoint(root);
    for (auto [i, v] : llvm::enumerate(captured)) {
      Value field = v;
      if (isa<MemRefType>(v.getType()))
        field = UnrealizedConversionCastOp::create(b, loc, fieldTypes[i], v).getResult(0);
      else if (v.getType().isIndex())
        field = arith::IndexCastOp::create(b, loc, i64, v);
      Value addr = LLVM::GEPOp::create(b, loc, ptr, structType, ctxPtr,
                                       ArrayRef<LLVM::GEPArg>{0, static_cast<int32_t>(i)});
      LLVM::StoreOp::create(b, loc, field, addr);
    }
    Value n = arith::ConstantIndexOp::create(b, loc, 1);
    for (Value t : tripValues(b, loop.getLowerBound(), loop.getUpperBound(), loop.getStep()))
      n = b.createOrFold<arith::MulIOp>(loc, n, t);
    Value fn = func::ConstantOp::create(b, loc, body.getFunctionType(), body.getSymName());
    Value zero = arith::ConstantIntOp::create(b, loc, i64, 0);
    Value n64 = arith::IndexCastOp::create(b, loc, i64, n);
    Value grainV = arith::ConstantIntOp::create(b, loc, i64, grain);
    func::CallOp::create(b, loc, runtime, ValueRange{fn, ctxPtr, zero, n64, grainV});
    root->erase();
  }
};
} // namespace
} // namespace mlir::mlircap
