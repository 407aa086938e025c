/*===-- mlircap-c/Core.h - C API of the mlircap compiler core -------------===*\
|*                                                                            *|
|* libmlircap_core.so links MLIR/LLVM 22.1.8 statically and exports only the  *|
|* functions below (a version script hides everything else), so it can share  *|
|* a process with another LLVM, e.g. torch-mlir's. IR crosses the boundary as *|
|* text. Functions returning `char *` return a malloc'ed string owned by the  *|
|* caller (free it with mlircap_free) or NULL on failure; then                *|
|* mlircap_last_error() holds the diagnostics (per thread).                   *|
\*===----------------------------------------------------------------------===*/
#ifndef MLIRCAP_C_CORE_H
#define MLIRCAP_C_CORE_H

#include <stdint.h>

#if defined(MLIRCAP_BUILDING_CORE)
#define MLIRCAP_EXPORT __attribute__((visibility("default")))
#else
#define MLIRCAP_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* "mlircap <version> (LLVM <version>)". Static storage. */
MLIRCAP_EXPORT const char *mlircap_version(void);

/* Diagnostics of the last failed call on this thread ("" if none). */
MLIRCAP_EXPORT const char *mlircap_last_error(void);

MLIRCAP_EXPORT void mlircap_free(void *p);

/* Parses `ir`, runs `pipeline` (textual pass pipeline anchored on
 * builtin.module, with or without the "builtin.module(...)" wrapper), verifies,
 * and prints the result. */
MLIRCAP_EXPORT char *mlircap_run_pipeline(const char *ir, const char *pipeline);

/* Lowers linalg-on-tensors to PTX through the GPU dialect and NVVM
 * (mlircap-gpu-pipeline). Returns the PTX of every kernel module, each
 * preceded by a line "// mlircap-kernel-module: <name>". */
MLIRCAP_EXPORT char *mlircap_to_ptx(const char *ir, const char *chip,
                                    const char *features);

/* CPU JIT. `ir` is linalg-on-tensors; it is lowered with mlircap-cpu-pipeline
 * (results become trailing out-parameters) and compiled with ORC at -O3.
 * Returns an engine handle or NULL. */
MLIRCAP_EXPORT void *mlircap_cpu_compile(const char *ir, int opt_level);

/* Address of the packed C-interface wrapper of `func`: a function
 * `void f(void **args)` where args[i] points to a pointer to the i-th memref
 * descriptor (inputs first, then outputs). NULL if absent. */
MLIRCAP_EXPORT void *mlircap_cpu_lookup(void *engine, const char *func);

MLIRCAP_EXPORT void mlircap_cpu_destroy(void *engine);

/* Runs the mlircap-opt driver (MlirOptMain) with all upstream dialects and
 * passes plus mlircap's. Returns the process exit code. */
MLIRCAP_EXPORT int mlircap_opt_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* MLIRCAP_C_CORE_H */
