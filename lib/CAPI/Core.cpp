//===- Core.cpp - the C API of libmlircap_core.so -------------------------===//
//
// Everything here runs behind the narrow C interface of mlircap-c/Core.h:
// IR text in; IR text, PTX, or a JIT-compiled CPU entry point out.
//
//===----------------------------------------------------------------------===//
#define MLIRCAP_BUILDING_CORE
#include "mlircap-c/Core.h"
#include "mlircap/Passes.h"
#include "InputCheck.h"
#include "LaunchPlan.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Passes/PassBuilder.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

using namespace mlir;

namespace {
thread_local std::string lastError;

void initOnce() {
  static std::once_flag flag;
  std::call_once(flag, [] {
    registerAllPasses();
    mlircap::registerMlircapPasses();
    mlircap::registerPipelines();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

void registerEverything(DialectRegistry &registry) {
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
}

const DialectRegistry &sharedRegistry() {
  static DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    registerEverything(*r);
    return r;
  }();
  return *registry;
}

char *dupString(llvm::StringRef s) {
  char *out = static_cast<char *>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

/// One compilation: a context with diagnostics captured as text.
struct Session {
  MLIRContext context{sharedRegistry(), MLIRContext::Threading::DISABLED};
  std::string diagnostics;
  ScopedDiagnosticHandler handler{&context, [this](Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << diag.getLocation() << ": ";
    switch (diag.getSeverity()) {
    case DiagnosticSeverity::Error: os << "error: "; break;
    case DiagnosticSeverity::Warning: os << "warning: "; break;
    case DiagnosticSeverity::Remark: os << "remark: "; break;
    case DiagnosticSeverity::Note: os << "note: "; break;
    }
    os << diag << "\n";
    for (Diagnostic &note : diag.getNotes())
      os << "  " << note.getLocation() << ": note: " << note << "\n";
    return success();
  }};

  Session() { initOnce(); }

  OwningOpRef<ModuleOp> parse(const char *ir) {
    if (!ir) {
      fail("no IR given");
      return {};
    }
    std::string unsafe = mlircap::checkKnownParserCrashes(ir, "<input>");
    if (!unsafe.empty()) {
      fail("input rejected before parsing:\n" + unsafe);
      return {};
    }
    auto module = parseSourceString<ModuleOp>(ir, &context);
    if (!module)
      fail("failed to parse the IR");
    return module;
  }

  LogicalResult run(ModuleOp module, llvm::StringRef pipeline) {
    pipeline = pipeline.trim();
    if (pipeline.consume_front("builtin.module(") && pipeline.consume_back(")"))
      pipeline = pipeline.trim();
    PassManager pm(&context);
    std::string parseErrors;
    llvm::raw_string_ostream errs(parseErrors);
    if (failed(parsePassPipeline(pipeline, pm, errs)))
      return fail("invalid pass pipeline: " + parseErrors);
    if (failed(pm.run(module)))
      return fail("pass pipeline failed");
    return success();
  }

  LogicalResult fail(const llvm::Twine &what) {
    lastError = what.str();
    if (!diagnostics.empty())
      lastError += "\n" + diagnostics;
    return failure();
  }
};

//===-- memrefCopy for JIT-compiled code ----------------------------------===//
// memref.copy between non-contiguous layouts lowers to a call to memrefCopy.
// We provide it ourselves so the JIT needs no MLIR runtime library.
struct UnrankedDescriptor {
  int64_t rank;
  void *descriptor;
};

void copyStrided(int64_t elemSize, const UnrankedDescriptor *src,
                 const UnrankedDescriptor *dst) {
  int64_t rank = src->rank;
  auto *s = static_cast<int64_t *>(src->descriptor);
  auto *d = static_cast<int64_t *>(dst->descriptor);
  // Layout: {allocated, aligned, offset, sizes[rank], strides[rank]}.
  char *sData = reinterpret_cast<char *>(s[1]) + s[2] * elemSize;
  char *dData = reinterpret_cast<char *>(d[1]) + d[2] * elemSize;
  const int64_t *sizes = s + 3, *sStrides = s + 3 + rank,
                *dStrides = d + 3 + rank;
  int64_t total = 1;
  for (int64_t i = 0; i < rank; ++i)
    total *= sizes[i];
  if (total == 0)
    return;
  llvm::SmallVector<int64_t> index(rank, 0);
  int64_t sOff = 0, dOff = 0;
  for (int64_t n = 0; n < total; ++n) {
    std::memcpy(dData + dOff * elemSize, sData + sOff * elemSize, elemSize);
    for (int64_t axis = rank - 1; axis >= 0; --axis) {
      if (++index[axis] < sizes[axis]) {
        sOff += sStrides[axis];
        dOff += dStrides[axis];
        break;
      }
      sOff -= sStrides[axis] * (sizes[axis] - 1);
      dOff -= dStrides[axis] * (sizes[axis] - 1);
      index[axis] = 0;
    }
  }
}

extern "C" void mlircapMemrefCopy(int64_t elemSize, UnrankedDescriptor *src,
                                  UnrankedDescriptor *dst) {
  copyStrided(elemSize, src, dst);
}
} // namespace

namespace {
/// The LLVM -O`optLevel` pipeline for `target` (loop and SLP vectorization
/// included). ExecutionEngine's makeOptimizingTransformer ran no pass at all
/// in this build (the JIT compiled unoptimized IR: scalar loops, every
/// memref descriptor rebuilt per access).
void optimizeModule(llvm::Module &m, llvm::TargetMachine *target, int optLevel) {
  if (target) {
    m.setDataLayout(target->createDataLayout());
    m.setTargetTriple(target->getTargetTriple());
  }
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopUnrolling = true;
  tuning.LoopInterleaving = true;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder pb(target, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel level = optLevel >= 3   ? llvm::OptimizationLevel::O3
                                  : optLevel == 2 ? llvm::OptimizationLevel::O2
                                  : optLevel == 1 ? llvm::OptimizationLevel::O1
                                                  : llvm::OptimizationLevel::O0;
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(m, mam);
}
} // namespace

namespace {
/// NULL or "" select the default target (sm_90; PTX 8.0 or the chip's minimum).
const char *chipOrDefault(const char *chip) {
  return chip && *chip ? chip : mlircap::kDefaultChip;
}
std::string featuresOrDefault(const char *chip, const char *features) {
  return features && *features ? std::string(features)
                               : mlircap::defaultGpuFeatures(chipOrDefault(chip));
}

/// "" if the GPU target is valid, else the error (see checkGpuTarget): an
/// unknown chip or feature aborts the process inside the NVPTX backend.
std::string checkTarget(const char *chip, const char *features) {
  initOnce();
  return mlircap::checkGpuTarget(chipOrDefault(chip), featuresOrDefault(chip, features));
}

/// JIT-compiles a module already lowered to the LLVM dialect (ORC, -O`optLevel`).
ExecutionEngine *createEngine(Session &session, ModuleOp module, int optLevel) {
  ExecutionEngineOptions options;
  optLevel = std::max(0, std::min(3, optLevel));
  // The optimizer needs the host's target machine: without it the loop
  // vectorizer's cost model knows no vector unit and vectorizes nothing.
  // (Only used while the engine is created, which runs the transformer.)
  std::unique_ptr<llvm::TargetMachine> tm;
  if (auto builder = llvm::orc::JITTargetMachineBuilder::detectHost()) {
    builder->setCodeGenOptLevel(static_cast<llvm::CodeGenOptLevel>(optLevel));
    if (auto created = builder->createTargetMachine())
      tm = std::move(*created);
    else
      llvm::consumeError(created.takeError());
  } else {
    llvm::consumeError(builder.takeError());
  }
  llvm::TargetMachine *target = tm.get();
  // options.transformer is a function_ref: the lambda must outlive create().
  auto transformer = [optLevel, target](llvm::Module *m) -> llvm::Error {
    optimizeModule(*m, target, optLevel);
    return llvm::Error::success();
  };
  options.transformer = transformer;
  options.jitCodeGenOptLevel = static_cast<llvm::CodeGenOptLevel>(optLevel);
  auto engine = ExecutionEngine::create(module, options);
  if (!engine) {
    std::string msg = llvm::toString(engine.takeError());
    (void)session.fail("JIT compilation failed: " + msg);
    return nullptr;
  }
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("memrefCopy")] = {
        llvm::orc::ExecutorAddr::fromPtr(&mlircapMemrefCopy),
        llvm::JITSymbolFlags::Exported};
    symbols[interner("mlircap_parallel_for")] = {
        llvm::orc::ExecutorAddr::fromPtr(&mlircap_parallel_for),
        llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  return engine->release();
}
} // namespace

extern "C" {

const char *mlircap_version(void) {
  return "mlircap 0.1 (LLVM " LLVM_VERSION_STRING ")";
}

const char *mlircap_last_error(void) { return lastError.c_str(); }

void mlircap_free(void *p) { std::free(p); }

char *mlircap_run_pipeline(const char *ir, const char *pipeline) {
  Session session;
  auto module = session.parse(ir);
  if (!module || failed(session.run(*module, pipeline ? pipeline : "")))
    return nullptr;
  std::string out;
  llvm::raw_string_ostream os(out);
  module->print(os);
  return dupString(out);
}

char *mlircap_to_ptx(const char *ir, const char *chip, const char *features) {
  Session session;
  std::string target = checkTarget(chip, features);
  if (!target.empty()) {
    (void)session.fail(target);
    return nullptr;
  }
  auto module = session.parse(ir);
  if (!module)
    return nullptr;
  std::string pipeline = mlircap::gpuPipeline(chipOrDefault(chip), featuresOrDefault(chip, features));
  if (failed(session.run(*module, pipeline)))
    return nullptr;
  std::string out;
  module->walk([&](gpu::BinaryOp binary) {
    for (Attribute attr : binary.getObjects()) {
      auto object = dyn_cast<gpu::ObjectAttr>(attr);
      if (!object)
        continue;
      out += "// mlircap-kernel-module: " + binary.getName().str() + "\n";
      out += object.getObject().getValue().str();
      out += "\n";
    }
  });
  return dupString(out);
}

char *mlircap_gpu_compile(const char *linalgIr, const char *chip,
                          const char *features) {
  Session session;
  std::string target = checkTarget(chip, features);
  if (!target.empty()) {
    (void)session.fail(target);
    return nullptr;
  }
  auto module = session.parse(linalgIr);
  if (!module)
    return nullptr;
  std::string pipeline = mlircap::gpuKernelPipeline(
      chipOrDefault(chip), featuresOrDefault(chip, features),
      mlircap::kDefaultNumSMs);
  if (failed(session.run(*module, pipeline)))
    return nullptr;
  std::string ptx;
  module->walk([&](gpu::BinaryOp binary) {
    for (Attribute attr : binary.getObjects())
      if (auto object = dyn_cast<gpu::ObjectAttr>(attr))
        ptx += object.getObject().getValue().str();
  });
  auto plan = mlircap::buildLaunchPlan(*module, ptx);
  if (failed(plan)) {
    (void)session.fail("cannot build the GPU launch plan");
    return nullptr;
  }
  return dupString(*plan);
}

void *mlircap_cpu_compile(const char *ir, int optLevel) {
  Session session;
  auto module = session.parse(ir);
  if (!module || failed(session.run(*module, mlircap::cpuPipeline())))
    return nullptr;
  return createEngine(session, *module, optLevel);
}

void *mlircap_cpu_plan_compile(const char *ir, int optLevel, char **planOut) {
  // Same kernels as the GPU path (mlircap-fuse: kernel formation at tensor
  // level), but each kernel is JIT-compiled for the CPU and library ops
  // (matmul, conv) stay in the plan for the runtime to run through torch.
  Session session;
  auto module = session.parse(ir);
  if (!module || failed(session.run(*module, mlircap::fusePipeline())))
    return nullptr;
  MLIRContext *ctx = &session.context;
  Builder b(ctx);
  auto cpuLaunch = b.getDictionaryAttr(
      {b.getNamedAttr("grid", b.getDenseI64ArrayAttr({1, 1, 1})),
       b.getNamedAttr("block", b.getDenseI64ArrayAttr({1, 1, 1})),
       b.getNamedAttr("smem", b.getI64IntegerAttr(0)),
       b.getNamedAttr("strategy", b.getStringAttr("cpu"))});
  for (auto func : module->getOps<func::FuncOp>())
    if (func->hasAttr("mlircap.kernel") && !func->hasAttr("mlircap.launch"))
      func->setAttr("mlircap.launch", cpuLaunch);
  auto plan = mlircap::buildLaunchPlan(*module, "");
  if (failed(plan)) {
    (void)session.fail("cannot build the CPU launch plan");
    return nullptr;
  }
  // The kernel module: kernels only, public, lowered for the JIT.
  OwningOpRef<ModuleOp> kernels(cast<ModuleOp>((*module)->clone()));
  for (auto func : llvm::make_early_inc_range(kernels->getOps<func::FuncOp>())) {
    if (!func->hasAttr("mlircap.kernel"))
      func.erase();
    else
      func.setPublic();
  }
  if (failed(session.run(*kernels, mlircap::cpuPipeline(/*fused=*/true))))
    return nullptr;
  ExecutionEngine *engine = createEngine(session, *kernels, optLevel);
  if (engine)
    *planOut = dupString(*plan);
  return engine;
}

void *mlircap_cpu_lookup(void *engine, const char *func) {
  auto *ee = static_cast<ExecutionEngine *>(engine);
  auto fn = ee->lookupPacked(std::string("_mlir_ciface_") + func);
  if (!fn) {
    lastError = "no function '" + std::string(func) +
                "' in the compiled module: " + llvm::toString(fn.takeError());
    return nullptr;
  }
  return reinterpret_cast<void *>(*fn);
}

void mlircap_cpu_destroy(void *engine) {
  delete static_cast<ExecutionEngine *>(engine);
}

int mlircap_opt_main(int argc, char **argv) {
  initOnce();
  DialectRegistry registry;
  registerEverything(registry);
  // MlirOptMain's own flow, with the input checked before the parser sees it.
  auto [inputFile, outputFile] = registerAndParseCLIOptions(
      argc, argv, "mlircap optimizer driver\n", registry);
  std::string error;
  auto input = openInputFile(inputFile, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return EXIT_FAILURE;
  }
  std::string unsafe = mlircap::checkKnownParserCrashes(
      input->getBuffer(), inputFile == "-" ? "<stdin>" : inputFile);
  if (!unsafe.empty()) {
    llvm::errs() << unsafe;
    return EXIT_FAILURE;
  }
  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return EXIT_FAILURE;
  }
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (failed(MlirOptMain(output->os(), std::move(input), registry, config)))
    return EXIT_FAILURE;
  output->keep();
  return EXIT_SUCCESS;
}

} // extern "C"
