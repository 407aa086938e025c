//===- DumpPtx.cpp - write the PTX of every gpu.binary to a file ---------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPDUMPPTX
#include "mlircap/Passes.h.inc"

namespace {
struct DumpPtx : impl::MlircapDumpPtxBase<DumpPtx> {
  using Base::Base;
  void runOnOperation() override {
    std::string text;
    getOperation().walk([&](gpu::BinaryOp binary) {
      for (Attribute attr : binary.getObjects())
        if (auto object = dyn_cast<gpu::ObjectAttr>(attr))
          text += object.getObject().getValue().str();
    });
    if (file.empty() || file == "-") {
      llvm::outs() << text;
      llvm::outs().flush();
      return;
    }
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec, llvm::sys::fs::OF_Text);
    if (ec) {
      getOperation().emitError("mlircap-dump-ptx: cannot open '")
          << file << "': " << ec.message();
      return signalPassFailure();
    }
    os << text;
  }
};
} // namespace
} // namespace mlir::mlircap
