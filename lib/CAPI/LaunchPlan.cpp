//===- LaunchPlan.cpp - the JSON launch plan of a compiled GPU module -----===//
//
// Input: a module after mlircap's GPU kernel pipeline: the entry function on
// tensors calls outlined kernels (func.call to `mlircap.kernel` functions that
// carry `mlircap.launch`) and library ops; gpu.binary holds the PTX.
// Output: the launch plan the runtime executes (the contract, checked at load:
// python/mlircap/runtime/schema.py).
//
// Every tensor SSA value the runtime must know gets an id:
//   input     function argument (index = position)
//   constant  dense constant, data inline (splat: one element, "splat": true)
//   buffer    result of a kernel or library op (allocate shape x dtype)
//   view      reshape / static slice / transpose / broadcast of another value,
//             always expressed on the underlying non-view value ("of") with an
//             element offset and element strides (0 for broadcast dims).
//
//===----------------------------------------------------------------------===//
#include "LaunchPlan.h"
#include "../Transforms/KernelUtils.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/JSON.h"

using namespace mlir;
namespace json = llvm::json;

namespace {

std::optional<std::string> dtypeName(Type t) {
  if (t.isF32()) return "f32";
  if (t.isF16()) return "f16";
  if (t.isBF16()) return "bf16";
  if (t.isF64()) return "f64";
  if (t.isInteger(64)) return "i64";
  if (t.isInteger(32)) return "i32";
  if (t.isInteger(16)) return "i16";
  if (t.isInteger(8)) return "i8";
  if (t.isInteger(1)) return "i1";
  return std::nullopt;
}

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int i = (int)shape.size() - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

struct Layout {
  int base;
  int64_t offset;
  SmallVector<int64_t> strides;
};

struct PlanBuilder {
  func::FuncOp func;
  ModuleOp module;
  DenseMap<Value, int> ids;
  std::vector<Layout> layouts;
  json::Array values, steps;

  json::Array shapeJson(ArrayRef<int64_t> shape) {
    json::Array a;
    for (int64_t d : shape)
      a.push_back(d);
    return a;
  }

  FailureOr<json::Object> baseRecord(Operation *at, Value v, StringRef kind) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t || !t.hasStaticShape())
      return at->emitError("mlircap plan: value of type ")
             << v.getType() << " is not a statically shaped tensor";
    auto dt = dtypeName(t.getElementType());
    if (!dt)
      return at->emitError("mlircap plan: unsupported element type ")
             << t.getElementType();
    json::Object o;
    o["id"] = (int64_t)layouts.size();
    o["shape"] = shapeJson(t.getShape());
    o["dtype"] = *dt;
    o["kind"] = kind.str();
    return o;
  }

  FailureOr<int> addBase(Operation *at, Value v, StringRef kind,
                         json::Object extra = {}) {
    auto rec = baseRecord(at, v, kind);
    if (failed(rec))
      return failure();
    for (auto &kv : extra)
      (*rec)[kv.first] = std::move(kv.second);
    int id = layouts.size();
    auto shape = cast<RankedTensorType>(v.getType()).getShape();
    layouts.push_back({id, 0, contiguousStrides(shape)});
    values.push_back(std::move(*rec));
    ids[v] = id;
    return id;
  }

  FailureOr<int> addView(Operation *at, Value v, Layout layout) {
    auto rec = baseRecord(at, v, "view");
    if (failed(rec))
      return failure();
    (*rec)["of"] = layout.base;
    (*rec)["offset"] = layout.offset;
    json::Array s;
    for (int64_t x : layout.strides)
      s.push_back(x);
    (*rec)["strides"] = std::move(s);
    int id = layouts.size();
    layouts.push_back(layout);
    values.push_back(std::move(*rec));
    ids[v] = id;
    return id;
  }

  /// Id of a value used by a step or returned.
  FailureOr<int> idOf(Operation *user, Value v) {
    auto it = ids.find(v);
    if (it != ids.end())
      return it->second;
    Operation *def = v.getDefiningOp();
    if (def && isa<tensor::EmptyOp>(def))
      return addBase(def, v, "buffer");
    if (def)
      return def->emitError("mlircap plan: the runtime cannot get the value of '")
             << def->getName() << "'";
    return user->emitError("mlircap plan: argument of unsupported type ")
           << v.getType();
  }

  bool isContiguous(int id, ArrayRef<int64_t> shape) {
    const Layout &l = layouts[id];
    auto want = contiguousStrides(shape);
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] != 1 && l.strides[i] != want[i])
        return false;
    return true;
  }

  LogicalResult constant(arith::ConstantOp cst) {
    auto t = dyn_cast<RankedTensorType>(cst.getType());
    if (!t)
      return success(); // scalars live in kernels
    Type et = t.getElementType();
    json::Object extra;
    json::Array data;
    int64_t n = mlircap::product(t.getShape());
    auto pushFloat = [&](const APFloat &f) {
      // JSON has no NaN or infinity (llvm::json would write a bare nan/inf,
      // which no JSON reader takes): those are strings Python's float() reads.
      if (f.isNaN() || f.isInfinity()) {
        data.push_back(f.isNaN() ? "nan" : f.isNegative() ? "-inf"
                                                          : "inf");
        return;
      }
      // llvm::json writes -0.0 as -0, which JSON readers take for the integer 0:
      // a string too, so that the sign reaches the runtime (copysign(x, -0.0)).
      if (f.isZero() && f.isNegative()) {
        data.push_back("-0.0");
        return;
      }
      bool lost;
      APFloat d = f;
      d.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
      data.push_back(d.convertToDouble());
    };
    auto pushInt = [&](const APInt &i) {
      if (i.getBitWidth() == 1)
        data.push_back((int64_t)i.getZExtValue());
      else
        data.push_back(i.getSExtValue());
    };
    bool splat = false;
    if (auto dense = dyn_cast<DenseElementsAttr>(cst.getValue())) {
      splat = dense.isSplat();
      if (isa<FloatType>(et)) {
        if (splat)
          pushFloat(dense.getSplatValue<APFloat>());
        else
          for (APFloat f : dense.getValues<APFloat>())
            pushFloat(f);
      } else if (isa<IntegerType>(et)) {
        if (splat)
          pushInt(dense.getSplatValue<APInt>());
        else
          for (APInt i : dense.getValues<APInt>())
            pushInt(i);
      } else {
        return cst.emitError("mlircap plan: unsupported constant element type ") << et;
      }
    } else if (auto res = dyn_cast<DenseResourceElementsAttr>(cst.getValue())) {
      AsmResourceBlob *blob = res.getRawHandle().getBlob();
      if (!blob)
        return cst.emitError("mlircap plan: constant resource has no data");
      ArrayRef<char> bytes = blob->getData();
      unsigned bits = et.getIntOrFloatBitWidth();
      unsigned size = bits == 1 ? 1 : bits / 8;
      if (bytes.size() != (size_t)(n * size) && bytes.size() != size)
        return cst.emitError("mlircap plan: constant resource has ")
               << bytes.size() << " bytes, expected " << n * size;
      splat = bytes.size() == size && n != 1;
      int64_t count = splat ? 1 : n;
      for (int64_t i = 0; i < count; ++i) {
        const char *p = bytes.data() + i * size;
        uint64_t raw = 0;
        std::memcpy(&raw, p, size);
        APInt ai(bits == 1 ? 8 : bits, raw);
        if (auto ft = dyn_cast<FloatType>(et))
          pushFloat(APFloat(ft.getFloatSemantics(), ai));
        else if (bits == 1)
          data.push_back((int64_t)(raw != 0));
        else
          pushInt(ai);
      }
    } else {
      return cst.emitError("mlircap plan: unsupported constant attribute");
    }
    extra["data"] = std::move(data);
    if (splat)
      extra["splat"] = true;
    return addBase(cst, cst.getResult(), "constant", std::move(extra));
  }

  LogicalResult view(Operation *op, Value src, Value result,
                     function_ref<FailureOr<Layout>(const Layout &,
                                                    RankedTensorType)> f) {
    auto srcId = idOf(op, src);
    if (failed(srcId))
      return failure();
    auto layout = f(layouts[*srcId], cast<RankedTensorType>(src.getType()));
    if (failed(layout))
      return failure();
    return addView(op, result, *layout);
  }

  LogicalResult expand(tensor::ExpandShapeOp op) {
    auto rt = op.getResultType();
    return view(op, op.getSrc(), op.getResult(),
                [&](const Layout &l, RankedTensorType) -> FailureOr<Layout> {
                  Layout out{l.base, l.offset, {}};
                  out.strides.resize(rt.getRank());
                  for (auto [j, group] : llvm::enumerate(op.getReassociationIndices())) {
                    int64_t s = l.strides[j];
                    for (int64_t d : llvm::reverse(group)) {
                      out.strides[d] = s;
                      s *= rt.getDimSize(d);
                    }
                  }
                  return out;
                });
  }

  LogicalResult collapse(tensor::CollapseShapeOp op) {
    return view(op, op.getSrc(), op.getResult(),
                [&](const Layout &l, RankedTensorType st) -> FailureOr<Layout> {
                  Layout out{l.base, l.offset, {}};
                  for (ReassociationIndices group : op.getReassociationIndices()) {
                    int64_t last = -1;
                    int64_t stride = 1;
                    for (int64_t d : llvm::reverse(group)) {
                      if (st.getDimSize(d) == 1)
                        continue;
                      if (last >= 0 && l.strides[d] != l.strides[last] * st.getDimSize(last))
                        return op.emitError("mlircap plan: collapse of a non-contiguous view");
                      if (last < 0)
                        stride = l.strides[d];
                      last = d;
                    }
                    out.strides.push_back(stride);
                  }
                  return out;
                });
  }

  LogicalResult slice(tensor::ExtractSliceOp op) {
    if (ShapedType::isDynamicShape(op.getStaticOffsets()) ||
        ShapedType::isDynamicShape(op.getStaticStrides()))
      return op.emitError("mlircap plan: dynamic slice");
    return view(op, op.getSource(), op.getResult(),
                [&](const Layout &l, RankedTensorType) -> FailureOr<Layout> {
                  Layout out{l.base, l.offset, {}};
                  llvm::SmallBitVector dropped = op.getDroppedDims();
                  for (unsigned i = 0; i < l.strides.size(); ++i) {
                    out.offset += op.getStaticOffsets()[i] * l.strides[i];
                    if (!dropped.test(i))
                      out.strides.push_back(l.strides[i] * op.getStaticStrides()[i]);
                  }
                  return out;
                });
  }

  LogicalResult viewGeneric(linalg::GenericOp op) {
    AffineMap in = op.getMatchingIndexingMap(op.getDpsInputOperand(0));
    return view(op, op.getDpsInputOperand(0)->get(), op.getResult(0),
                [&](const Layout &l, RankedTensorType) -> FailureOr<Layout> {
                  Layout out{l.base, l.offset, {}};
                  out.strides.assign(op.getNumLoops(), 0);
                  for (auto [j, e] : llvm::enumerate(in.getResults()))
                    out.strides[cast<AffineDimExpr>(e).getPosition()] = l.strides[j];
                  return out;
                });
  }

  LogicalResult kernelCall(func::CallOp call) {
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (!callee || !callee->hasAttr(mlircap::kKernelAttr))
      return call.emitError("mlircap plan: call to '")
             << call.getCallee() << "' is not a compiled kernel";
    auto launch = callee->getAttrOfType<DictionaryAttr>(mlircap::kLaunchAttr);
    if (!launch)
      return call.emitError("mlircap plan: kernel '")
             << call.getCallee() << "' has no launch configuration";
    json::Object step;
    step["kind"] = "kernel";
    step["name"] = call.getCallee().str();
    auto dims = [&](StringRef key) {
      json::Array a;
      for (int64_t x : cast<DenseI64ArrayAttr>(launch.get(key)).asArrayRef())
        a.push_back(x);
      return a;
    };
    step["grid"] = dims("grid");
    step["block"] = dims("block");
    step["smem"] = cast<IntegerAttr>(launch.get("smem")).getInt();
    if (launch.get("grid_stride"))
      step["grid_stride"] = true; // any grid up to `grid` is correct
    if (auto s = dyn_cast_or_null<StringAttr>(launch.get("strategy"))) {
      step["strategy"] = s.getValue().str();
      if (s.getValue().starts_with("pointwise_vec"))
        step["align"] = 16;
    }
    json::Array args;
    for (Value v : call.getOperands()) {
      auto id = idOf(call, v);
      if (failed(id))
        return failure();
      auto shape = cast<RankedTensorType>(v.getType()).getShape();
      if (!isContiguous(*id, shape))
        return call.emitError("mlircap plan: kernel argument is a non-contiguous view");
      json::Object a;
      a["value"] = *id;
      args.push_back(std::move(a));
    }
    for (Value r : call.getResults()) {
      auto id = addBase(call, r, "buffer");
      if (failed(id))
        return failure();
      json::Object a;
      a["value"] = *id;
      args.push_back(std::move(a));
    }
    step["args"] = std::move(args);
    steps.push_back(std::move(step));
    return success();
  }

  LogicalResult library(linalg::LinalgOp op) {
    json::Object step;
    step["kind"] = "library";
    step["op"] = mlircap::libraryOpName(op).str();
    json::Array ins;
    std::optional<std::pair<int64_t, int64_t>> padding;
    for (OpOperand *in : op.getDpsInputOperands()) {
      Value v = in->get();
      if (auto pad = v.getDefiningOp<tensor::PadOp>())
        if ((padding = mlircap::convInputPadding(pad)))
          v = pad.getSource(); // the convolution pads its input itself
      auto id = idOf(op, v);
      if (failed(id))
        return failure();
      ins.push_back(*id);
    }
    Value init = op.getDpsInitOperand(0)->get();
    if (Value bias = mlircap::libraryBiasOf(op)) {
      // a convolution's bias (mlircap-library-init) or a matmul's
      // (mlircap-matmul-bias): its third operand
      auto id = idOf(op, bias);
      if (failed(id))
        return failure();
      ins.push_back(*id);
    } else {
      auto fill = init.getDefiningOp<linalg::FillOp>();
      if (!fill || !(matchPattern(fill.getInputs()[0], m_AnyZeroFloat()) ||
                     matchPattern(fill.getInputs()[0], m_Zero())))
        return op.emitError("mlircap plan: library op init must be a zero fill "
                            "(run mlircap-library-init)");
    }
    auto out = addBase(op, op->getResult(0), "buffer");
    if (failed(out))
      return failure();
    step["ins"] = std::move(ins);
    step["out"] = *out;
    json::Object attrs;
    auto convAttrs = [&](auto conv) {
      json::Array s, d;
      for (int64_t x : conv.getStrides().template getValues<int64_t>())
        s.push_back(x);
      for (int64_t x : conv.getDilations().template getValues<int64_t>())
        d.push_back(x);
      attrs["strides"] = std::move(s);
      attrs["dilations"] = std::move(d);
      if (padding)
        attrs["padding"] = json::Array{padding->first, padding->second};
    };
    if (auto conv = dyn_cast<linalg::Conv2DNchwFchwOp>(op.getOperation()))
      convAttrs(conv);
    else if (auto dw = dyn_cast<linalg::DepthwiseConv2DNchwChwOp>(op.getOperation()))
      convAttrs(dw);
    else if (auto cl = dyn_cast<linalg::Conv2DNhwcFhwcOp>(op.getOperation()))
      convAttrs(cl);
    else if (auto dcl = dyn_cast<linalg::DepthwiseConv2DNhwcHwcOp>(op.getOperation()))
      convAttrs(dcl);
    step["attrs"] = std::move(attrs);
    steps.push_back(std::move(step));
    return success();
  }

  LogicalResult build(json::Object &plan) {
    for (BlockArgument arg : func.getArguments()) {
      json::Object extra;
      extra["index"] = (int64_t)arg.getArgNumber();
      if (failed(addBase(func, arg, "input", std::move(extra))))
        return failure();
    }
    json::Array outputs;
    for (Operation &op : func.getBody().front()) {
      LogicalResult r = success();
      if (auto cst = dyn_cast<arith::ConstantOp>(op))
        r = constant(cst);
      else if (auto call = dyn_cast<func::CallOp>(op))
        r = kernelCall(call);
      else if (isa<linalg::LinalgOp>(op) && mlircap::isLibraryOp(&op))
        r = library(cast<linalg::LinalgOp>(op));
      else if (auto e = dyn_cast<tensor::ExpandShapeOp>(op))
        r = expand(e);
      else if (auto c = dyn_cast<tensor::CollapseShapeOp>(op))
        r = collapse(c);
      else if (auto s = dyn_cast<tensor::ExtractSliceOp>(op))
        r = slice(s);
      else if (auto g = dyn_cast<linalg::GenericOp>(op);
               g && mlircap::isLibraryBiasInit(g) &&
               llvm::all_of(g->getUses(), [&](OpOperand &use) {
                 auto lin = dyn_cast<linalg::LinalgOp>(use.getOwner());
                 return lin && lin.isDpsInit(&use) && mlircap::libraryBiasOf(lin);
               }))
        r = success(); // a bias the library ops reading it add (library())
      else if (auto g = dyn_cast<linalg::GenericOp>(op); g && mlircap::isViewGeneric(g))
        r = viewGeneric(g);
      else if (auto pad = dyn_cast<tensor::PadOp>(op); pad && mlircap::convInputPadding(pad))
        r = success(); // applied by the convolutions that read it (library())
      else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands()) {
          auto id = idOf(ret, v);
          if (failed(id))
            return failure();
          outputs.push_back(*id);
        }
      } else if (isa<tensor::EmptyOp, linalg::FillOp, cf::AssertOp>(op) ||
                 (op.getNumRegions() == 0 &&
                  llvm::none_of(op.getResultTypes(),
                                [](Type t) { return isa<ShapedType>(t); }) &&
                  isPure(&op))) {
        // Allocated on demand / folded / scalar: nothing to do.
      } else {
        r = op.emitError("mlircap plan: unsupported op '") << op.getName() << "'";
      }
      if (failed(r))
        return failure();
    }
    plan["func"] = func.getSymName().str();
    plan["values"] = std::move(values);
    plan["steps"] = std::move(steps);
    plan["outputs"] = std::move(outputs);
    return success();
  }
};
} // namespace

namespace mlir::mlircap {
FailureOr<std::string> buildLaunchPlan(ModuleOp module, llvm::StringRef ptx) {
  func::FuncOp entry = module.lookupSymbol<func::FuncOp>("main");
  if (!entry || entry.isExternal() || entry->hasAttr(kKernelAttr)) {
    entry = nullptr;
    for (auto f : module.getOps<func::FuncOp>())
      if (f.isPublic() && !f.isExternal() && !f->hasAttr(kKernelAttr)) {
        entry = f;
        break;
      }
  }
  if (!entry)
    return module.emitError("mlircap plan: no public function with a body");
  PlanBuilder builder{entry, module, {}, {}, {}, {}};
  json::Object plan;
  if (failed(builder.build(plan)))
    return failure();
  plan["ptx"] = ptx.str();
  std::string out;
  llvm::raw_string_ostream os(out);
  os << json::Value(std::move(plan));
  return out;
}
} // namespace mlir::mlircap
