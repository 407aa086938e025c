//===- Core.cpp - the C API of libmlircap_core.so -------------------------===//
//
// Everything here runs behind the narrow C interface of mlircap-c/Core.h:
// IR text in; IR text, PTX, or JIT-compiled CPU code (loadable again from its
// object file) out.
//
//===----------------------------------------------------------------------===//
#define MLIRCAP_BUILDING_CORE
#include "mlircap-c/Core.h"
#include "mlircap/Passes.h"
#include "InputCheck.h"
#include "LaunchPlan.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
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
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h"
#include "llvm/ExecutionEngine/SectionMemoryManager.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Passes/PassBuilder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

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

// Conversions to bfloat16 that LLVM may call as compiler-rt/libgcc builtins:
// on an x86 host without AVX512-BF16 an `fptrunc ... to bfloat` the optimizer
// forms (InstCombine narrows max(fpext a, fpext b) to a bf16 max, which is
// promoted back to f32 and truncated) becomes a call to __truncsfbf2, which
// libgcc has only from GCC 13: the kernel did not link and the op ran through
// torch (optimizeModule now keeps such selects integer: IntegerBf16Selects;
// this stays for any other f32 -> bf16 rounding the backend makes a call).
// Defined here for the JIT. The result is a bf16 in the low 16 bits of
// xmm0 (the x86-64 ABI of __bf16), returned as a float whose low bits are it.
uint16_t roundToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: quiet, sign kept
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u); // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float bf16Result(uint16_t h) {
  uint32_t bits = h;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

extern "C" float mlircapTruncSfBf2(float f) { return bf16Result(roundToBf16(f)); }

} // namespace

namespace {
/// `select c, bfloat a, bfloat b` (also of vectors) as a select of the bits.
/// InstCombine moves the bitcasts of mlircap-emulate-low-precision's integer
/// rounding (select(isnan, 0x7fc0, rounded) : i16, then bitcast to bf16) across
/// the select; an x86 target without AVX512-BF16 has no bf16 select and
/// promotes it to f32 and back, rounding through a call to __truncsfbf2 per
/// element (a bf16 amax: 5.7x slower than eager; before that symbol was
/// defined, a kernel that did not link). Run after every InstCombine
/// (peephole), so the vectorizer and the backend see integer selects.
struct IntegerBf16Selects : llvm::PassInfoMixin<IntegerBf16Selects> {
  llvm::PreservedAnalyses run(llvm::Function &f, llvm::FunctionAnalysisManager &) {
    llvm::SmallVector<llvm::SelectInst *> selects;
    for (llvm::Instruction &inst : llvm::instructions(f))
      if (auto *sel = llvm::dyn_cast<llvm::SelectInst>(&inst))
        if (sel->getType()->getScalarType()->isBFloatTy())
          selects.push_back(sel);
    for (llvm::SelectInst *sel : selects) {
      llvm::Type *type = sel->getType();
      llvm::Type *bits = type->getWithNewType(llvm::Type::getInt16Ty(f.getContext()));
      llvm::IRBuilder<> b(sel);
      llvm::Value *v = b.CreateSelect(sel->getCondition(), b.CreateBitCast(sel->getTrueValue(), bits),
                                      b.CreateBitCast(sel->getFalseValue(), bits));
      sel->replaceAllUsesWith(b.CreateBitCast(v, type));
      sel->eraseFromParent();
    }
    return selects.empty() ? llvm::PreservedAnalyses::all() : llvm::PreservedAnalyses::none();
  }
};

/// The LLVM -O`optLevel` pipeline for `target` (loop and SLP vectorization
/// included). ExecutionEngine's makeOptimizingTransformer ran no pass at all
/// in this build (the JIT compiled unoptimized IR: scalar loops, every
/// memref descriptor rebuilt per access).
void optimizeModule(llvm::Module &m, llvm::TargetMachine *target, int optLevel) {
  if (target) {
    m.setDataLayout(target->createDataLayout());
    m.setTargetTriple(target->getTargetTriple());
    // x86 subtargets with AVX-512 default to 256-bit vectors (LLVM's
    // "prefer 256 bit" tuning of skylake-avx512 .. sapphirerapids, against
    // clock throttling); torch's own CPU kernels use 512-bit ones on such a
    // host (ATen's AVX512 capability), and a kernel bound by its arithmetic
    // (exp, erf, division) ran up to 2x slower than eager's at 256 bits.
    if (target->getTargetFeatureString().contains("+avx512f"))
      for (llvm::Function &f : m)
        if (!f.isDeclaration() && !f.hasFnAttribute("prefer-vector-width"))
          f.addFnAttr("prefer-vector-width", "512");
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
  pb.registerPeepholeEPCallback([](llvm::FunctionPassManager &fpm, llvm::OptimizationLevel) {
    fpm.addPass(IntegerBf16Selects());
  });
  pb.registerOptimizerLastEPCallback(
      [](llvm::ModulePassManager &mpm, llvm::OptimizationLevel, llvm::ThinOrFullLTOPhase) {
        mpm.addPass(llvm::createModuleToFunctionPassAdaptor(IntegerBf16Selects()));
      });
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
  if (level == llvm::OptimizationLevel::O0)
    mpm.addPass(llvm::createModuleToFunctionPassAdaptor(IntegerBf16Selects()));
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

/// JIT-compiled CPU code: one relocatable object, linked into its own ORC
/// LLJIT. The object is kept so that the runtime can store it on disk
/// (mlircap_cpu_object) and a later process load it without compiling
/// (mlircap_cpu_load). `object` is declared first: the JIT links from it and
/// is destroyed before it.
struct CpuEngine {
  std::string object;
  std::unique_ptr<llvm::orc::LLJIT> jit;
};

llvm::Expected<std::unique_ptr<llvm::TargetMachine>> hostTargetMachine(int optLevel) {
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    return builder.takeError();
  builder->setCodeGenOptLevel(static_cast<llvm::CodeGenOptLevel>(optLevel));
  return builder->createTargetMachine();
}

/// For every C-interface wrapper `_mlir_ciface_f(args...)`, an entry
/// `_mlir__mlir_ciface_f(void **args)` that calls it with *args[i] (and stores
/// a result, if any, to *args[n]): one calling convention for every function,
/// the one mlircap_cpu_lookup documents.
void addPackedEntries(llvm::Module &m) {
  llvm::LLVMContext &ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::SmallVector<llvm::Function *> wrapped;
  for (llvm::Function &f : m)
    if (!f.isDeclaration() && f.getName().starts_with("_mlir_ciface_"))
      wrapped.push_back(&f);
  auto *type = llvm::FunctionType::get(b.getVoidTy(), {b.getPtrTy()}, false);
  for (llvm::Function *f : wrapped) {
    auto *entry = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage,
                                         "_mlir_" + f->getName(), m);
    b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", entry));
    llvm::Value *packed = entry->getArg(0);
    auto argPtr = [&](unsigned i) {
      return b.CreateLoad(b.getPtrTy(), b.CreateConstGEP1_64(b.getPtrTy(), packed, i));
    };
    llvm::SmallVector<llvm::Value *> args;
    for (llvm::Argument &arg : f->args())
      args.push_back(b.CreateLoad(arg.getType(), argPtr(arg.getArgNo())));
    llvm::Value *result = b.CreateCall(f, args);
    if (!result->getType()->isVoidTy())
      b.CreateStore(result, argPtr(f->arg_size()));
    b.CreateRetVoid();
  }
}

/// Links `object` (a relocatable object file for this host) into a new JIT.
/// Unresolved symbols surface at the first mlircap_cpu_lookup (ORC links the
/// whole object then).
CpuEngine *loadCpuObject(std::string object) {
  auto engine = std::make_unique<CpuEngine>();
  engine->object = std::move(object);
  auto jit =
      llvm::orc::LLJITBuilder()
          .setObjectLinkingLayerCreator([](llvm::orc::ExecutionSession &es)
                                            -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
            return std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(
                es, [](const llvm::MemoryBuffer &) {
                  return std::make_unique<llvm::SectionMemoryManager>();
                });
          })
          .create();
  if (!jit) {
    lastError = "cannot create the CPU JIT: " + llvm::toString(jit.takeError());
    return nullptr;
  }
  llvm::orc::JITDylib &jd = (*jit)->getMainJITDylib();
  const llvm::DataLayout &layout = (*jit)->getDataLayout();
  auto process =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(layout.getGlobalPrefix());
  if (!process) {
    lastError = "CPU JIT: " + llvm::toString(process.takeError());
    return nullptr;
  }
  jd.addGenerator(std::move(*process));
  // The core's own symbols are hidden: what the kernels call is defined here.
  llvm::orc::MangleAndInterner interner((*jit)->getExecutionSession(), layout);
  llvm::orc::SymbolMap symbols;
  symbols[interner("memrefCopy")] = {llvm::orc::ExecutorAddr::fromPtr(&mlircapMemrefCopy),
                                     llvm::JITSymbolFlags::Exported};
  symbols[interner("mlircap_parallel_for")] = {
      llvm::orc::ExecutorAddr::fromPtr(&mlircap_parallel_for), llvm::JITSymbolFlags::Exported};
  symbols[interner("__truncsfbf2")] = {llvm::orc::ExecutorAddr::fromPtr(&mlircapTruncSfBf2),
                                       llvm::JITSymbolFlags::Exported};
  llvm::Error err = jd.define(llvm::orc::absoluteSymbols(std::move(symbols)));
  if (!err)
    err = (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBuffer(
        engine->object, "mlircap-cpu-object", /*RequiresNullTerminator=*/false));
  if (err) {
    lastError = "cannot load the CPU object code: " + llvm::toString(std::move(err));
    return nullptr;
  }
  engine->jit = std::move(*jit);
  return engine.release();
}

/// Compiles a module already lowered to the LLVM dialect to an object for
/// this host (LLVM -O`optLevel`) and loads it.
CpuEngine *compileCpu(Session &session, ModuleOp module, int optLevel) {
  optLevel = std::max(0, std::min(3, optLevel));
  // The optimizer needs the host's target machine: without it the loop
  // vectorizer's cost model knows no vector unit and vectorizes nothing.
  auto tm = hostTargetMachine(optLevel);
  if (!tm) {
    (void)session.fail("no target machine for this host: " + llvm::toString(tm.takeError()));
    return nullptr;
  }
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule) {
    (void)session.fail("cannot translate the CPU module to LLVM IR");
    return nullptr;
  }
  if (llvmModule->getNamedGlobal("llvm.global_ctors")) {
    (void)session.fail("CPU JIT: global constructors are not supported");
    return nullptr;
  }
  addPackedEntries(*llvmModule);
  optimizeModule(*llvmModule, tm->get(), optLevel);
  llvm::orc::SimpleCompiler compiler(**tm);
  auto object = compiler(*llvmModule);
  if (!object) {
    (void)session.fail("CPU code generation failed: " + llvm::toString(object.takeError()));
    return nullptr;
  }
  return loadCpuObject((*object)->getBuffer().str());
}

/// The GNU build ID of the object holding this code (hex), else its path,
/// size and modification time: what identifies the compiler that produced
/// cached code.
std::string findBuildId() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void *>(&findBuildId), &info))
    return "";
  struct Search {
    uintptr_t address;
    std::string id;
  } search{reinterpret_cast<uintptr_t>(&findBuildId), ""};
  dl_iterate_phdr(
      [](dl_phdr_info *object, size_t, void *data) -> int {
        auto *s = static_cast<Search *>(data);
        bool mine = false;
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const auto &ph = object->dlpi_phdr[i];
          uintptr_t start = object->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->address >= start && s->address < start + ph.p_memsz)
            mine = true;
        }
        if (!mine)
          return 0;
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const auto &ph = object->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE)
            continue;
          auto *p = reinterpret_cast<const unsigned char *>(object->dlpi_addr + ph.p_vaddr);
          const unsigned char *end = p + ph.p_memsz;
          while (p + 12 <= end) {
            uint32_t nameSize, descSize, type;
            std::memcpy(&nameSize, p, 4);
            std::memcpy(&descSize, p + 4, 4);
            std::memcpy(&type, p + 8, 4);
            const unsigned char *name = p + 12;
            const unsigned char *desc = name + ((nameSize + 3) & ~3u);
            if (desc + descSize > end)
              break;
            if (type == NT_GNU_BUILD_ID && nameSize == 4 && std::memcmp(name, "GNU", 4) == 0) {
              static const char hex[] = "0123456789abcdef";
              for (uint32_t k = 0; k < descSize; ++k) {
                s->id += hex[desc[k] >> 4];
                s->id += hex[desc[k] & 15];
              }
              return 1;
            }
            p = desc + ((descSize + 3) & ~3u);
          }
        }
        return 1;
      },
      &search);
  if (!search.id.empty())
    return search.id;
  struct stat st;
  if (info.dli_fname && stat(info.dli_fname, &st) == 0)
    return std::string(info.dli_fname) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtime);
  return "";
}
} // namespace

extern "C" {

const char *mlircap_version(void) {
  return "mlircap 0.1 (LLVM " LLVM_VERSION_STRING ")";
}

const char *mlircap_last_error(void) { return lastError.c_str(); }

const char *mlircap_build_id(void) {
  static const std::string id = findBuildId();
  return id.c_str();
}

const char *mlircap_cpu_target(void) {
  static const std::string target = [] {
    auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!builder) {
      llvm::consumeError(builder.takeError());
      return std::string("unknown");
    }
    std::vector<std::string> features = builder->getFeatures().getFeatures();
    std::sort(features.begin(), features.end());
    std::string out = builder->getTargetTriple().str() + " " + builder->getCPU() + " ";
    for (size_t i = 0; i < features.size(); ++i)
      out += (i ? "," : "") + features[i];
    return out;
  }();
  return target.c_str();
}

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
  return compileCpu(session, *module, optLevel);
}

void *mlircap_cpu_plan_compile(const char *ir, int optLevel, char **planOut) {
  // Same kernels as the GPU path (mlircap-fuse: kernel formation at tensor
  // level), but each kernel is JIT-compiled for the CPU and library ops
  // (matmul, conv) stay in the plan for the runtime to run through torch.
  Session session;
  auto module = session.parse(ir);
  if (!module)
    return nullptr;
  // library convolutions add their bias (mlircap-library-init, KernelUtils.h's
  // kConvBiasModuleAttr)
  (*module)->setAttr("mlircap.conv_bias", UnitAttr::get(&session.context));
  if (failed(session.run(*module, mlircap::fusePipeline(/*channelsLast=*/true))))
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
  CpuEngine *engine = compileCpu(session, *kernels, optLevel);
  if (engine)
    *planOut = dupString(*plan);
  return engine;
}

void *mlircap_cpu_load(const char *object, size_t size) {
  initOnce();
  if (!object || size == 0) {
    lastError = "no CPU object code given";
    return nullptr;
  }
  return loadCpuObject(std::string(object, size));
}

const char *mlircap_cpu_object(void *engine, size_t *size) {
  auto *e = static_cast<CpuEngine *>(engine);
  *size = e->object.size();
  return e->object.data();
}

void *mlircap_cpu_lookup(void *engine, const char *func) {
  auto *e = static_cast<CpuEngine *>(engine);
  auto fn = e->jit->lookup(std::string("_mlir__mlir_ciface_") + func);
  if (!fn) {
    lastError = "no function '" + std::string(func) +
                "' in the compiled module: " + llvm::toString(fn.takeError());
    return nullptr;
  }
  return fn->toPtr<void *>();
}

void mlircap_cpu_destroy(void *engine) { delete static_cast<CpuEngine *>(engine); }

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
