//===- Pipelines.cpp - mlircap's named pass pipelines --------------------===//
//
// mlircap-fuse          linalg-on-tensors -> fused linalg-on-tensors with every
//                       GPU kernel outlined into a `mlircap.kernel` function
//                       (drop-asserts, simplify-math, generalize, library-init,
//                       tensor-to-generic, fuse-elementwise, form-kernels)
// mlircap-cpu-pipeline  linalg-on-tensors -> LLVM dialect, results as out-params
//                       (elementwise fusion only: no kernel outlining, asserts
//                       kept)
// mlircap-gpu-pipeline  linalg-on-tensors -> kernels outlined and called from the
//                       caller (tensor level), gpu.binary holding their PTX (sm_90)
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::mlircap {

// Elementwise fusion only (what the CPU path runs).
static const char *kFuseElementwise =
    "func.func(mlircap-narrow-library-operands, mlircap-simplify-math,"
    " mlircap-generalize-elementwise,"
    " mlircap-library-init,"
    "mlircap-tensor-to-generic, mlircap-fuse-elementwise),"
    "canonicalize, cse";

static const char *kBufferize =
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true},"
    "canonicalize";

std::string fusePipeline() {
  return std::string("func.func(mlircap-drop-asserts),") + kFuseElementwise +
         ",mlircap-form-kernels,canonicalize,cse";
}

std::string cpuPipeline() {
  return llvm::formatv(
      "{0},{1},mlircap-emit-c-interface,"
      "buffer-deallocation-pipeline,"
      "func.func(convert-linalg-to-loops,mlircap-math-approx),mlircap-widen-bool-memrefs,convert-scf-to-cf,"
      "expand-strided-metadata,lower-affine,finalize-memref-to-llvm,"
      "convert-math-to-llvm,convert-math-to-libm,convert-to-llvm,"
      "reconcile-unrealized-casts",
      kFuseElementwise, kBufferize);
}

std::string gpuKernelPipeline(llvm::StringRef chip, llvm::StringRef features,
                              int64_t numSMs) {
  return llvm::formatv(
      "{0},mlircap-gpu-codegen{{num-sms={3}},"
      "nvvm-attach-target{{chip={1} features={2} O=3},"
      "gpu.module(lower-affine,convert-scf-to-cf,"
      "convert-gpu-to-nvvm{{use-bare-ptr-memref-call-conv=true},"
      "canonicalize,cse,reconcile-unrealized-casts),"
      "gpu-module-to-binary{{format=isa}",
      fusePipeline(), chip, features, numSMs);
}

std::string gpuPipeline(llvm::StringRef chip, llvm::StringRef features) {
  return gpuKernelPipeline(chip, features, 132);
}

namespace {
struct GpuPipelineOptions : PassPipelineOptions<GpuPipelineOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("NVIDIA target chip"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features"),
                               llvm::cl::init("+ptx80")};
  Option<int64_t> numSMs{*this, "num-sms",
                         llvm::cl::desc("Streaming multiprocessors (grid cap)"),
                         llvm::cl::init(132)};
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
      "mlircap-cpu-pipeline",
      "Lower linalg-on-tensors to the LLVM dialect for the CPU JIT",
      [](OpPassManager &pm) { (void)addPipeline(pm, cpuPipeline()); });
  PassPipelineRegistration<GpuPipelineOptions>(
      "mlircap-gpu-pipeline",
      "mlircap-fuse, mlircap-gpu-codegen, NVVM (bare-pointer kernel params) "
      "and PTX in a gpu.binary",
      [](OpPassManager &pm, const GpuPipelineOptions &o) {
        (void)addPipeline(pm, gpuKernelPipeline(o.chip, o.features, o.numSMs));
      });
}

} // namespace mlir::mlircap
