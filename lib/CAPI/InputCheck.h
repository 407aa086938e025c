//===- InputCheck.h - reject inputs that crash upstream parsers -----------===//
//
// The SDK is built with assertions on, and a few upstream custom-op parsers
// assert (abort the process) on malformed input instead of emitting a
// diagnostic. Found by bench/fuzz_opt.py; each pattern has a lit regression
// test in test/Robustness/. We check for those patterns before parsing.
//
//===----------------------------------------------------------------------===//
#ifndef MLIRCAP_CAPI_INPUTCHECK_H
#define MLIRCAP_CAPI_INPUTCHECK_H

#include "llvm/ADT/StringRef.h"
#include <string>

namespace mlir::mlircap {
/// Returns "" if `text` is safe to parse, else diagnostics in the form
/// "<bufferName>:<line>:<col>: error: <message>\n" (one per problem).
std::string checkKnownParserCrashes(llvm::StringRef text, llvm::StringRef bufferName);
} // namespace mlir::mlircap

#endif
