//===- TargetDefaults.h - the default GPU target ----------------*- C++ -*-===//
//
// The default GPU target of the C++ core (NVIDIA H200), in one place. The C API
// and the Python binding select it for a NULL or "" chip/features. Python has
// the same values in python/mlircap/config.py; test/python/test_config.py
// checks that the two agree.
//
//===----------------------------------------------------------------------===//
#ifndef MLIRCAP_TARGETDEFAULTS_H
#define MLIRCAP_TARGETDEFAULTS_H

#include <cstdint>

namespace mlir::mlircap {

/// NVIDIA chip that GPU code is compiled for.
inline constexpr const char *kDefaultChip = "sm_90";
/// PTX features; chips whose minimum PTX version is newer get that instead.
inline constexpr const char *kDefaultPtxFeatures = "+ptx80";
/// The PTX version of kDefaultPtxFeatures (8.0), as the NVPTX backend counts.
inline constexpr unsigned kDefaultPtxVersion = 80;
/// Streaming multiprocessors of the default chip: the grid-size cap of kernels.
inline constexpr int64_t kDefaultNumSMs = 132;

} // namespace mlir::mlircap

#endif // MLIRCAP_TARGETDEFAULTS_H
