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

#include <stddef.h>
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

/* What identifies the code of this library: its GNU build ID (hex), or when
 * it has none its path, size and modification time. Compile caches key on it
 * so that a rebuilt compiler never loads code an older one produced. */
MLIRCAP_EXPORT const char *mlircap_build_id(void);

/* "<triple> <cpu> <sorted features>" of this host: the target of the CPU JIT. */
MLIRCAP_EXPORT const char *mlircap_cpu_target(void);

/* Diagnostics of the last failed call on this thread ("" if none). */
MLIRCAP_EXPORT const char *mlircap_last_error(void);

MLIRCAP_EXPORT void mlircap_free(void *p);

/* Parses `ir`, runs `pipeline` (textual pass pipeline anchored on
 * builtin.module, with or without the "builtin.module(...)" wrapper), verifies,
 * and prints the result. */
MLIRCAP_EXPORT char *mlircap_run_pipeline(const char *ir, const char *pipeline);

/* Lowers linalg-on-tensors to PTX through the GPU dialect and NVVM
 * (mlircap-gpu-pipeline). Returns the PTX of every kernel module, each
 * preceded by a line "// mlircap-kernel-module: <name>". `chip` and
 * `features` as for mlircap_gpu_compile (checked the same way). */
MLIRCAP_EXPORT char *mlircap_to_ptx(const char *ir, const char *chip,
                                    const char *features);

/* Compiles linalg-on-tensors (static shapes) for NVIDIA GPUs and returns the
 * launch plan as JSON text (NULL on error; mlircap_last_error() then names the
 * offending op and its loc(...)). `chip` defaults to "sm_90" and `features` to
 * "+ptx80" (or the chip's minimum PTX version when newer) when NULL or "".
 * The target is checked before anything is compiled: `chip` must be an sm_<N>
 * the NVPTX backend knows (sm_30 or newer), `features` comma-separated
 * "+ptx<NN>" of at least the chip's minimum and 6.0; anything else returns
 * NULL with the reason in mlircap_last_error() (the backend itself would
 * abort the process). The plan:
 *
 * {"func": "main",
 *  "ptx": "<one PTX module with every kernel entry>",
 *  "values": [   // every tensor the runtime handles, ids are positions
 *    {"id": 0, "shape": [8,128], "dtype": "f32", "kind": "input", "index": 0},
 *    {"id": 1, "shape": [128], "dtype": "f32", "kind": "constant",
 *     "data": [...], "splat": true},          // "splat" only when splat: 1 element
 *    {"id": 2, "shape": [8,128], "dtype": "f32", "kind": "buffer"},
 *    {"id": 3, "shape": [128,8], "dtype": "f32", "kind": "view", "of": 2,
 *     "offset": 0, "strides": [1,128]}],      // element offset/strides into "of",
 *                                            // "of" is never itself a view;
 *                                            // stride 0 = broadcast dim
 *  "steps": [    // in order
 *    {"kind": "kernel", "name": "main_k0", "grid": [g,1,1], "block": [b,1,1],
 *     "smem": 0,                              // dynamic shared memory bytes
 *     "strategy": "pointwise|pointwise_vec4|row_block|row_warp|reduction_naive",
 *     "align": 16,                            // only for pointwise_vec4: with
 *                                            // 16B-aligned pointers it uses
 *                                            // 128-bit accesses (checked in the
 *                                            // kernel; else a scalar loop)
 *     "args": [{"value": 0}, {"value": 2}]},   // kernel inputs, then outputs;
 *                                            // each a contiguous value's pointer
 *    {"kind": "library", "op": "matmul", "ins": [0, 3], "out": 2,
 *     "attrs": {"strides": [1,1], "dilations": [1,1]}}],  // conv only
 *  "outputs": [2]}
 *
 * dtype: f32 f16 bf16 f64 i64 i32 i16 i8 i1 (i1: one byte per element).
 * Library ops: matmul, matmul_transpose_b, batch_matmul,
 * batch_matmul_transpose_b (ins [A, B]), conv2d_nchw_fchw (ins [input,
 * filter]) and conv2d_depthwise_nchw_chw (ins [input, filter (C, kh, kw)]),
 * convolutions with attrs strides/dilations/padding.
 * `out` is a fresh buffer fully written by the op: a non-zero init is added
 * by the following kernel (mlircap-library-init). Kernel launch: every arg is
 * a raw device pointer (bare-pointer calling convention). */
MLIRCAP_EXPORT char *mlircap_gpu_compile(const char *linalg_ir,
                                         const char *chip,
                                         const char *features);

/* CPU JIT. `ir` is linalg-on-tensors; it is lowered with mlircap-cpu-pipeline
 * (results become trailing out-parameters), optimized at -O`opt_level` and
 * compiled to one object file for this host (mlircap_cpu_target), which ORC
 * links into the process. Returns an engine handle or NULL. */
MLIRCAP_EXPORT void *mlircap_cpu_compile(const char *ir, int opt_level);

/* CPU launch plan: kernels formed as for the GPU (mlircap-fuse), each
 * JIT-compiled for the CPU (callable with mlircap_cpu_lookup by kernel name,
 * arguments = inputs then outputs), library ops (matmul, conv) left to the
 * runtime. Returns the engine and stores the plan JSON (same schema as
 * mlircap_gpu_compile, "ptx" empty) in *plan_out (free with mlircap_free). */
MLIRCAP_EXPORT void *mlircap_cpu_plan_compile(const char *ir, int opt_level,
                                              char **plan_out);

/* The engine's object code (valid while the engine lives): what
 * mlircap_cpu_load takes to rebuild the same engine without compiling. */
MLIRCAP_EXPORT const char *mlircap_cpu_object(void *engine, size_t *size);

/* An engine from object code returned by mlircap_cpu_object (this host and
 * this build of the library: see mlircap_build_id, mlircap_cpu_target), or
 * NULL if it is not an object file. Symbols are resolved at the first
 * mlircap_cpu_lookup, which returns NULL if one is missing. */
MLIRCAP_EXPORT void *mlircap_cpu_load(const char *object, size_t size);

/* Address of the packed C-interface wrapper of `func`: a function
 * `void f(void **args)` where args[i] points to a pointer to the i-th memref
 * descriptor (inputs first, then outputs). NULL if absent. */
MLIRCAP_EXPORT void *mlircap_cpu_lookup(void *engine, const char *func);

MLIRCAP_EXPORT void mlircap_cpu_destroy(void *engine);

/* Threads the CPU kernels may use (the caller's thread included; at least
 * 1). Default: the number of hardware threads. The Python runtime sets it
 * to torch.get_num_threads() before each call. */
MLIRCAP_EXPORT void mlircap_set_num_threads(int n);
MLIRCAP_EXPORT int mlircap_get_num_threads(void);

/* Runs body(ctx, begin, end) over chunks of [lo, hi) that cover it exactly,
 * on up to mlircap_get_num_threads() threads, each chunk at least `grain`
 * iterations (a range of less than 2 * grain runs on the calling thread).
 * Returns when every chunk is done. JIT-compiled kernels call it (see
 * mlircap-outline-parallel); a call made while another is running, or from
 * inside a body, runs on the calling thread. */
MLIRCAP_EXPORT void mlircap_parallel_for(void (*body)(void *, int64_t, int64_t),
                                         void *ctx, int64_t lo, int64_t hi,
                                         int64_t grain);

/* A float32 NCHW depthwise convolution (one filter per channel), a CPU plan step
 * the runtime adds to a program like a kernel (lib/CAPI/Depthwise.cpp). Packed
 * arguments: args[0] points to {has bias, stride h, stride w, padding h, padding w,
 * dilation h, dilation w}; then pointers to memref descriptors (contiguous) of the
 * input (N, C, H, W), the filter (C, KH, KW), the bias (C) if it has one, and the
 * result (N, C, OH, OW). Runs on up to mlircap_get_num_threads() threads. */
MLIRCAP_EXPORT void mlircap_cpu_depthwise_conv2d(void **args);

/* Runs the mlircap-opt driver (MlirOptMain) with all upstream dialects and
 * passes plus mlircap's. Returns the process exit code. */
MLIRCAP_EXPORT int mlircap_opt_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* MLIRCAP_C_CORE_H */
