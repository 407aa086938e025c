//===- Pipelines.cpp - mlircap's named pass pipelines --------------------===//
//
// mlircap-fuse          linalg-on-tensors -> fused linalg-on-tensors
// mlircap-cpu-pipeline  linalg-on-tensors -> LLVM dialect, results as out-params
// mlircap-gpu-pipeline  linalg-on-tensors -> gpu.binary holding PTX (sm_90 default)
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::mlircap {

static const char *kFuse =
    "func.func(mlircap-generalize-elementwise, mlircap-fuse-elementwise),"
    "canonicalize, cse";

static const char *kBufferize =
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true},"
    "canonicalize";

std::string cpuPipeline() {
  return llvm::formatv(
      "{0},{1},mlircap-emit-c-interface,"
      "buffer-deallocation-pipeline,"
      "func.func(convert-linalg-to-loops),convert-scf-to-cf,"
      "expand-strided-metadata,lower-affine,finalize-memref-to-llvm,"
      "convert-math-to-llvm,convert-math-to-libm,convert-to-llvm,"
      "reconcile-unrealized-casts",
      kFuse, kBufferize);
}

std::string gpuPipeline(llvm::StringRef chip, llvm::StringRef features) {
  return llvm::formatv(
      "{0},{1},"
      "func.func(convert-linalg-to-parallel-loops,"
      "scf-parallel-loop-tiling{{parallel-loop-tile-sizes=1,256 no-min-max-bounds=true},"
      "gpu-map-parallel-loops,convert-parallel-loops-to-gpu),"
      "gpu-kernel-outlining,lower-affine,canonicalize,cse,"
      "nvvm-attach-target{{chip={2} features={3} O=3},"
      "gpu.module(convert-scf-to-cf,convert-gpu-to-nvvm{{index-bitwidth=64},"
      "canonicalize,cse,reconcile-unrealized-casts),"
      "gpu-to-llvm,convert-scf-to-cf,expand-strided-metadata,lower-affine,"
      "convert-to-llvm,reconcile-unrealized-casts,"
      "gpu-module-to-binary{{format=isa}",
      kFuse, kBufferize, chip, features);
}

namespace {
struct GpuPipelineOptions : PassPipelineOptions<GpuPipelineOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("NVIDIA target chip"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features"),
                               llvm::cl::init("+ptx80")};
};

LogicalResult addPipeline(OpPassManager &pm, llvm::StringRef text) {
  return parsePassPipeline(text, pm);
}
} // namespace

void registerPipelines() {
  PassPipelineRegistration<>(
      "mlircap-fuse", "Fuse linalg-on-tensors into kernel-sized generics",
      [](OpPassManager &pm) { (void)addPipeline(pm, kFuse); });
  PassPipelineRegistration<>(
      "mlircap-cpu-pipeline",
      "Lower linalg-on-tensors to the LLVM dialect for the CPU JIT",
      [](OpPassManager &pm) { (void)addPipeline(pm, cpuPipeline()); });
  PassPipelineRegistration<GpuPipelineOptions>(
      "mlircap-gpu-pipeline",
      "Lower linalg-on-tensors to GPU kernels and serialize them to PTX",
      [](OpPassManager &pm, const GpuPipelineOptions &o) {
        (void)addPipeline(pm, gpuPipeline(o.chip, o.features));
      });
}

} // namespace mlir::mlircap
