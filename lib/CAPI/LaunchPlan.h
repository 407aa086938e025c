//===- LaunchPlan.h - launch plan JSON from a compiled GPU module --------===//
#ifndef MLIRCAP_LIB_CAPI_LAUNCHPLAN_H
#define MLIRCAP_LIB_CAPI_LAUNCHPLAN_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include <string>

namespace mlir::mlircap {
/// Builds the launch plan (JSON text, schema in mlircap-c/Core.h) of `module`
/// after mlircap's GPU kernel pipeline. Unsupported ops are reported as
/// diagnostics at their location, and failure is returned.
FailureOr<std::string> buildLaunchPlan(ModuleOp module, llvm::StringRef ptx);
} // namespace mlir::mlircap

#endif
