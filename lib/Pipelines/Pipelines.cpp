//===- Pipelines.cpp - mlircap's named pass pipelines --------------------===//
//
// mlircap-fuse          linalg-on-tensors -> fused linalg-on-tensors with every
//                       GPU kernel outlined into a `mlircap.kernel` function
//                       (drop-asserts, propagate-nan, simplify-math, generalize,
//                       library-init, tensor-to-generic, fuse-elementwise,
//                       form-kernels)
// mlircap-gpu-fuse      mlircap-fuse as the GPU pipeline runs it (plus
//                       mlircap-conv-channels-last: NHWC library convolutions)
// mlircap-cpu-pipeline  linalg-on-tensors -> LLVM dialect, results as out-params
//                       (f32 sums in f64, bf16/f16 ops in f32 rounded per op,
//                       elementwise fusion only: no kernel
//                       outlining, asserts kept; outer parallel loops with
//                       enough work run on the runtime's thread pool; kernels'
//                       data pointers marked noalias)
// mlircap-gpu-pipeline  linalg-on-tensors -> kernels outlined and called from the
//                       caller (tensor level), gpu.binary holding their PTX (sm_90);
//                       library convolutions in NHWC (mlircap-conv-channels-last)
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TargetParser/Triple.h"
#include <memory>

namespace mlir::mlircap {

// NaN semantics of single torch ops (clamp/relu/max as cmpf+select): only
// before fusion, where each payload is one op. After it, a comparison fused
// with a separate `where` looks the same, and where(x > 0, x, 0) must give 0
// for NaN, not maximumf's NaN.
static const char *kPropagateNan = "func.func(mlircap-propagate-nan),";

// Elementwise fusion only (what the CPU path runs).
static const char *kFuseElementwise =
    "func.func(mlircap-narrow-library-operands,"
    " mlircap-simplify-math,"
    " mlircap-generalize-elementwise,"
    " mlircap-library-init,"
    " mlircap-matmul-bias,"
    "mlircap-tensor-to-generic, mlircap-fuse-elementwise),"
    "canonicalize, cse";

// Results become out-params. Kernels (`fused`: one function per kernel, each
// result computed once) write them in place: their allocations are hoisted.
// A whole graph may return one value twice (`return %a, %a`), and upstream's
// hoisting erases that allocation once per use (a use after free: SIGSEGV in
// updateReturnOps), so there each result is copied into its out-param.
static const char *kBufferize =
    "one-shot-bufferize{{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-results-to-out-params{{hoist-static-allocs={0} modify-public-functions=true},"
    "canonicalize";

std::string fusePipeline(bool channelsLast) {
  std::string fuse = kFuseElementwise;
  if (channelsLast) {
    // NHWC library convolutions (cuDNN's native layout), after library-init
    // (zero-filled inits) and before pads become generics.
    llvm::StringRef at = "mlircap-tensor-to-generic";
    fuse.insert(fuse.find(at.str()), "mlircap-conv-channels-last,");
  }
  return std::string("func.func(mlircap-drop-asserts),") + kPropagateNan + fuse +
         ",mlircap-form-kernels,canonicalize,cse";
}

std::string cpuPipeline(bool fused) {
  return llvm::formatv(
      "func.func(mlircap-widen-sums),{2}{0},{1},mlircap-emit-c-interface,"
      "buffer-deallocation-pipeline,"
      "func.func(mlircap-reduction-loops,cse,convert-linalg-to-parallel-loops,"
      "mlircap-emulate-low-precision),mlircap-trig-functions,"
      "func.func(mlircap-math-approx),mlircap-widen-bool-memrefs,"
      "mlircap-outline-parallel,mlircap-mark-noalias,convert-scf-to-cf,"
      "expand-strided-metadata,lower-affine,finalize-memref-to-llvm,"
      "convert-math-to-llvm,convert-math-to-libm,convert-to-llvm,"
      "reconcile-unrealized-casts,mlircap-apply-noalias,"
      "mlircap-bf16-memory-as-i16",
      kFuseElementwise, llvm::formatv(kBufferize, fused).str(),
      fused ? "" : kPropagateNan);
}

std::string gpuKernelPipeline(llvm::StringRef chip, llvm::StringRef features,
                              int64_t numSMs) {
  return llvm::formatv(
      "{0},mlircap-gpu-codegen{{num-sms={3}},"
      "nvvm-attach-target{{chip={1} features={2} O=3},"
      "gpu.module(lower-affine,convert-scf-to-cf,"
      "convert-gpu-to-nvvm{{use-bare-ptr-memref-call-conv=true},"
      // math ops without a libdevice function (integer math.absi: T5's
      // relative position buckets) become LLVM intrinsics
      "convert-math-to-llvm,"
      "canonicalize,cse,reconcile-unrealized-casts),"
      "gpu-module-to-binary{{format=isa}",
      fusePipeline(/*channelsLast=*/true), chip, features, numSMs);
}

/// `ptxNN` -> NN, else 0.
static unsigned ptxVersionOf(llvm::StringRef feature) {
  unsigned v = 0;
  if (!feature.consume_front("ptx") || feature.getAsInteger(10, v))
    return 0;
  return v;
}

/// The minimum PTX version of an NVIDIA chip, as the NVPTX backend of LLVM
/// 22 requires it (NVPTXSubtarget.cpp, getMinPTXVersionForSM: a lower
/// explicit version is a fatal error there); 0 for a chip not in the table.
static unsigned minPtxVersion(llvm::StringRef chip) {
  return llvm::StringSwitch<unsigned>(chip)
      .Cases({"sm_20", "sm_21", "sm_30", "sm_35"}, 32)
      .Cases({"sm_32", "sm_50"}, 40)
      .Cases({"sm_37", "sm_52"}, 41)
      .Case("sm_53", 42)
      .Cases({"sm_60", "sm_61", "sm_62"}, 50)
      .Case("sm_70", 60)
      .Case("sm_72", 61)
      .Case("sm_75", 63)
      .Case("sm_80", 70)
      .Case("sm_86", 71)
      .Case("sm_87", 74)
      .Cases({"sm_89", "sm_90"}, 78)
      .Case("sm_90a", 80)
      .Cases({"sm_100", "sm_100a", "sm_101", "sm_101a"}, 86)
      .Cases({"sm_120", "sm_120a"}, 87)
      .Cases({"sm_100f", "sm_101f", "sm_103", "sm_103f", "sm_103a", "sm_120f",
              "sm_121", "sm_121f", "sm_121a"},
             88)
      .Cases({"sm_88", "sm_110", "sm_110f", "sm_110a"}, 90)
      .Default(0);
}

std::string checkGpuTarget(llvm::StringRef chip, llvm::StringRef features) {
  // The NVPTX backend does not validate these: an unknown chip is a warning
  // and then a fatal "Cannot select" in instruction selection, a feature
  // without +/- an assertion, a PTX version below the chip's minimum a fatal
  // error. Each of those ends the process, so check everything here.
  if (chip.empty())
    return "invalid GPU target: the chip is empty (expected e.g. 'sm_90')";
  llvm::StringRef digits = chip;
  if (!digits.consume_front("sm_") || digits.empty() ||
      !llvm::isDigit(digits.front()))
    return ("invalid GPU target: chip '" + chip +
            "' is not an NVIDIA chip name of the form sm_<N> (e.g. 'sm_90')")
        .str();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return "invalid GPU target: the NVPTX backend is not available: " + error;
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(triple, "", ""));
  if (!sti)
    return "invalid GPU target: cannot create the NVPTX subtarget";
  if (!sti->isCPUStringValid(chip)) {
    std::string known;
    for (const llvm::SubtargetSubTypeKV &p : sti->getAllProcessorDescriptions()) {
      llvm::StringRef name(p.Key);
      if (name.starts_with("sm_"))
        known += (known.empty() ? "" : ", ") + name.str();
    }
    return ("invalid GPU target: chip '" + chip +
            "' is not known to the NVPTX backend (known: " + known + ")")
        .str();
  }
  unsigned minPtx = minPtxVersion(chip);
  if (!minPtx)
    return ("invalid GPU target: chip '" + chip + "' is not supported").str();
  unsigned smVersion = 0;
  (void)digits.take_while(llvm::isDigit).getAsInteger(10, smVersion);
  // Every reduction kernel uses warp shuffles (shfl.sync): sm_30 and PTX 6.0
  // at least, else instruction selection fails (a fatal error).
  if (smVersion < 30)
    return ("invalid GPU target: chip '" + chip +
            "' has no warp shuffles; mlircap needs sm_30 or newer")
        .str();
  unsigned ptx = 0;
  llvm::SmallVector<llvm::StringRef> items;
  features.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    item = item.trim();
    if (item.empty())
      continue;
    llvm::StringRef name = item;
    unsigned v = name.consume_front("+") ? ptxVersionOf(name) : 0;
    bool known = v && llvm::any_of(sti->getAllProcessorFeatures(),
                                   [&](const llvm::SubtargetFeatureKV &f) {
                                     return name == f.Key;
                                   });
    if (!known)
      return ("invalid GPU target: feature '" + item +
              "' is not a PTX version the NVPTX backend knows (expected "
              "'+ptx<NN>', e.g. '+ptx80')")
          .str();
    if (v < minPtx)
      return llvm::formatv("invalid GPU target: PTX version {0}.{1} ('{2}') "
                           "is below the minimum {3}.{4} of chip '{5}'",
                           v / 10, v % 10, item, minPtx / 10, minPtx % 10, chip)
          .str();
    ptx = std::max(ptx, v);
  }
  if (!ptx)
    ptx = minPtx; // the backend's default for the chip
  if (ptx < 60)
    return llvm::formatv("invalid GPU target: PTX version {0}.{1} has no "
                         "warp shuffles (shfl.sync); mlircap needs PTX 6.0 or "
                         "newer (e.g. features=+ptx60)",
                         ptx / 10, ptx % 10)
        .str();
  return "";
}

std::string defaultGpuFeatures(llvm::StringRef chip) {
  unsigned minPtx = minPtxVersion(chip);
  return minPtx > kDefaultPtxVersion ? llvm::formatv("+ptx{0}", minPtx).str()
                                     : std::string(kDefaultPtxFeatures);
}

std::string gpuPipeline(llvm::StringRef chip, llvm::StringRef features) {
  return gpuKernelPipeline(chip, features, kDefaultNumSMs);
}

namespace {
struct GpuPipelineOptions : PassPipelineOptions<GpuPipelineOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("NVIDIA target chip"),
                           llvm::cl::init(kDefaultChip)};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features"),
                               llvm::cl::init(kDefaultPtxFeatures)};
  Option<int64_t> numSMs{*this, "num-sms",
                         llvm::cl::desc("Streaming multiprocessors (grid cap)"),
                         llvm::cl::init(kDefaultNumSMs)};
};

LogicalResult addPipeline(OpPassManager &pm, llvm::StringRef text) {
  return parsePassPipeline(text, pm);
}
} // namespace

void registerPipelines() {
  PassPipelineRegistration<>(
      "mlircap-fuse",
      "Fuse linalg-on-tensors and outline every GPU kernel into a "
      "mlircap.kernel function (library ops stay in the caller)",
      [](OpPassManager &pm) { (void)addPipeline(pm, fusePipeline()); });
  PassPipelineRegistration<>(
      "mlircap-gpu-fuse",
      "mlircap-fuse as mlircap-gpu-pipeline runs it: library convolutions in "
      "NHWC (mlircap-conv-channels-last)",
      [](OpPassManager &pm) { (void)addPipeline(pm, fusePipeline(/*channelsLast=*/true)); });
  PassPipelineRegistration<>(
      "mlircap-cpu-pipeline",
      "Lower linalg-on-tensors to the LLVM dialect for the CPU JIT",
      [](OpPassManager &pm) { (void)addPipeline(pm, cpuPipeline()); });
  // Registered with a builder that can fail: invalid options are a
  // diagnostic (mlircap-opt exits 1), not an abort inside the NVPTX backend.
  registerPassPipeline(
      "mlircap-gpu-pipeline",
      "mlircap-fuse, mlircap-gpu-codegen, NVVM (bare-pointer kernel params) "
      "and PTX in a gpu.binary",
      [](OpPassManager &pm, llvm::StringRef optionsStr,
         llvm::function_ref<LogicalResult(const llvm::Twine &)> errorHandler) {
        GpuPipelineOptions o;
        if (failed(o.parseFromString(optionsStr)))
          return failure();
        std::string bad = checkGpuTarget(o.chip, o.features);
        if (!bad.empty())
          return errorHandler("mlircap-gpu-pipeline: " + bad);
        if (o.numSMs < 1 || o.numSMs > 4096)
          return errorHandler("mlircap-gpu-pipeline: num-sms must be in [1, 4096], got " +
                              llvm::Twine(o.numSMs));
        return addPipeline(pm, gpuKernelPipeline(o.chip, o.features, o.numSMs));
      },
      [](llvm::function_ref<void(const detail::PassOptions &)> optHandler) {
        optHandler(GpuPipelineOptions());
      });
}

} // namespace mlir::mlircap
