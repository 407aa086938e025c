"""Every ``MLIRCAP_*`` environment variable and every target default, in one place.

Torch-free and dependency-free, so setup code and tools can import it. Code reads a
variable through :func:`env` (its default comes from :data:`ENV`), never with a literal
``os.environ.get("MLIRCAP_...", default)``; ``test/python/test_config.py`` checks that
every ``MLIRCAP_*`` name used in python/, scripts/, bench/, setup.py and the tests is
listed here, and that the C++ defaults (include/mlircap/TargetDefaults.h) agree.

The README's table is ``markdown_table()``:
``python -c "from mlircap import config; print(config.markdown_table())"``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# --------------------------------------------------------------------------- targets
# The default GPU target is the NVIDIA H200 (Hopper). The C++ core has the same
# defaults as named constants in include/mlircap/TargetDefaults.h; NULL or "" for the
# chip/features in the C API and binding select them there.
DEFAULT_CHIP = "sm_90"
"""NVIDIA chip that GPU code is compiled for (``chip=`` of mlircap-gpu-pipeline)."""
DEFAULT_PTX_FEATURES = "+ptx80"
"""PTX ISA version (``features=``); chips that need a newer one (sm_100+) get their minimum."""
DEFAULT_NUM_SMS = 132
"""Streaming multiprocessors of the default chip (H200): the grid-size cap of GPU kernels."""
DEFAULT_CPU_OPT_LEVEL = 3
"""LLVM optimization level of the CPU JIT."""


# --------------------------------------------------------------------------- environment
@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str | None  # None: unset (the feature is off / the value is computed)
    meaning: str
    used_by: str


def _vars(*vs: EnvVar) -> dict[str, EnvVar]:
    return {v.name: v for v in vs}


ENV: dict[str, EnvVar] = _vars(
    # runtime
    EnvVar("MLIRCAP_LOGS", "", "log areas printed on stderr: comma-separated "
           "progress, graph_breaks, guards, recompiles, kernels, passes, fallback, or all",
           "mlircap/logs.py"),
    EnvVar("MLIRCAP_CACHE_DIR", None, "on-disk cache of GPU launch plans, compiled CPU code "
           "and the capture extension build (default $XDG_CACHE_HOME/mlircap, else ~/.cache/mlircap)",
           "mlircap/runtime/cuda.py, mlircap/runtime/cpu.py, mlircap/capture/_ext.py, mlircap/capture/_tensor_ext.py"),
    EnvVar("MLIRCAP_CPU_CACHE", "1", "0 disables the on-disk cache of compiled CPU code "
           "(every process compiles its graphs again)", "mlircap/runtime/cpu.py"),
    EnvVar("MLIRCAP_COMPILE_BACKWARD", "1", "0 runs aot_autograd's backward graphs as they are "
           "(torch's aten kernels) instead of compiling them (CPU and CUDA)",
           "mlircap/backend.py"),
    EnvVar("MLIRCAP_DUMP_DIR", None, "write every stage of every graph and a repro.sh there",
           "mlircap/backend.py"),
    EnvVar("MLIRCAP_CASCADE_SUMS", None, "1 (read by the C++ core): CPU float row sums add their terms "
           "in the order of eager's cascade sum (bit-equal sums and means; off by default: up to 3x slower "
           "than the blocked sums in places, bench/sum_speed.py)", "lib/Transforms/CascadeSums.cpp"),
    EnvVar("MLIRCAP_COMPILE_WORKER", "1", "0 compiles in-process instead of in the isolated "
           "compile worker (debugging)", "mlircap/worker.py"),
    EnvVar("MLIRCAP_COMPILE_TIMEOUT", "900", "seconds a graph may compile before it runs "
           "eagerly instead", "mlircap/worker.py"),
    EnvVar("MLIRCAP_FUSE_ATTENTION", "1", "0 keeps hand-written attention (matmul, softmax, "
           "matmul) as it is instead of one fused attention kernel (flash / memory-efficient); "
           "force fuses at any size (by default on the CPU float32 only from 256K score elements, "
           "bfloat16/float16 from 4M)",
           "mlircap/attention.py"),
    EnvVar("MLIRCAP_SPLIT_REDUCTIONS", "1", "0 keeps long reductions over few rows (GroupNorm "
           "statistics) in one level on CUDA instead of partial sums over row slices; force splits "
           "them on the CPU too", "mlircap/split_reductions.py"),
    EnvVar("MLIRCAP_GPU_GROUP_STATS", "1", "0 keeps GroupNorm statistics and normalization on the "
           "grouped view on CUDA instead of per-channel spatial sums and a per-channel normalization "
           "(which let the convolutions around it run NHWC); force applies them on any device",
           "mlircap/split_reductions.py"),
    EnvVar("MLIRCAP_GPU_BOUNDS_CHECKS", "1", "0 runs index reads with indices from the inputs "
           "(gather, index_select, embedding, take, x[idx]) as eager islands on CUDA instead of "
           "compiling them clamped, with torch._assert_async on the range check (eager's "
           "device-side assert)", "mlircap/bounds.py"),
    EnvVar("MLIRCAP_CPU_LIBRARY_OPS", "1", "0 compiles log_softmax, erfinv, erfc, and large bfloat16/float16 "
           "linear/convolution with a bias, on the CPU instead of calling torch's kernels "
           "(partition.CPU_LIBRARY_OPS, CPU_NARROW_LIBRARY_MACS)", "python/mlircap/partition.py"),
    EnvVar("MLIRCAP_PHYSICAL_INPUTS", "1", "0 copies graph inputs that are permutations of a "
           "contiguous tensor (attention's output, channels-last images) contiguous on CUDA instead of "
           "compiling the graph for their memory order; force does it on the CPU too",
           "mlircap/layouts.py"),
    EnvVar("MLIRCAP_MATMUL_BIAS", "1", "0 adds a Linear's bias in the kernel after its library matmul "
           "(a bf16 matmul then stores its float32 sum) instead of passing it to the matmul as "
           "torch.addmm does (mlircap-matmul-bias)", "mlircap/runtime/plan.py"),
    EnvVar("MLIRCAP_CUDA_GRAPHS", "1", "0 disables CUDA graphs for GPU plans",
           "mlircap/runtime/cuda.py"),
    EnvVar("MLIRCAP_CUDNN_BENCHMARK", None, "1 lets cuDNN time its algorithms for the plan's "
           "convolutions (once per shape, before a CUDA graph is captured); default: "
           "torch.backends.cudnn.benchmark", "mlircap/runtime/plan.py"),
    EnvVar("MLIRCAP_GPU_CHANNELS_LAST", None, "0 keeps the GPU plan's convolutions NCHW (default: "
           "NHWC convolutions, activations between them NHWC: mlircap-conv-channels-last)",
           "mlircap/runtime/cuda.py"),
    EnvVar("MLIRCAP_CPU_CHANNELS_LAST", None, "1 runs the CPU plan's convolutions in NHWC as the GPU "
           "plan does (mlircap-conv-channels-last; default: NCHW)", "mlircap/runtime/cpu.py"),
    EnvVar("MLIRCAP_CPU_KEEP_MIB", "256", "MiB of large CPU-plan intermediates kept between calls "
           "for reuse by any plan (each call would otherwise fault their pages in again); 0 frees "
           "them at the end of every call", "mlircap/runtime/cpu.py"),
    EnvVar("MLIRCAP_CPU_POOL", None, "own runs CPU kernels' parallel loops on the core's own thread "
           "pool instead of torch's OpenMP team", "lib/CAPI/Parallel.cpp"),
    EnvVar("MLIRCAP_LIB_DIR", None, "directory searched first for the built core "
           "(_mlircap*.so, libmlircap_core.so); before <repo>/build/lib and the package's _lib/",
           "mlircap/_core.py, scripts/gpu-bundle"),
    # capture
    EnvVar("MLIRCAP_CAPTURE_NO_EXT", None, "1 forces the capture layer's pure-Python "
           "fallback (no C frame-evaluation extension; runs eagerly)", "mlircap/capture/_ext.py"),
    EnvVar("MLIRCAP_CAPTURE_NO_TENSOR_EXT", None, "1 checks tensor guards with torch's TensorGuards "
           "instead of the capture layer's compiled tensor-metadata check", "mlircap/capture/_tensor_ext.py"),
    EnvVar("MLIRCAP_CAPTURE_STATIC_DEPTH", None, "1 uses static value-stack depths on "
           "Python 3.11 (always on 3.12); check also compares them with the real ones",
           "mlircap/capture/_bytecode.py"),
    EnvVar("MLIRCAP_PYBIND11_INCLUDE", None, "pybind11 include directory for building the "
           "capture extension when the pybind11 package is not installed",
           "mlircap/capture/_ext.py"),
    # tests
    EnvVar("MLIRCAP_WORKER_FAULT", None, "test hook: the compile worker aborts, segfaults or "
           "hangs (abort, segv, hang), or segfaults in torch-mlir's lowering of graphs whose IR holds "
           "TEXT (lowering-segv:TEXT)", "mlircap/worker.py, test/python/test_trust.py"),
    # build and tools
    EnvVar("MLIRCAP_BUILD_DIR", "build", "CMake build directory of `pip install` / "
           "./scripts/setup (relative to the repository)", "setup.py"),
    EnvVar("MLIRCAP_JOBS", None, "parallel build jobs (default: the number of CPUs)", "setup.py"),
    EnvVar("MLIRCAP_LINT_BASE", None, "git revision the lint step compares against (default: "
           "the merge-base with origin/main when that differs from HEAD, else HEAD~1)",
           "scripts/lint"),
    EnvVar("MLIRCAP_SITE", "/tmp/mlircap-site", "where scripts/gpu-bundle installs torch-mlir "
           "on the GPU host", "scripts/gpu-bundle"),
    EnvVar("MLIRCAP_GPU_LIB", "build-gpu/lib", "where scripts/gpu-bundle installs the core and "
           "binding on the GPU host (relative to the repository)", "scripts/gpu-bundle"),
    EnvVar("MLIRCAP_COMMIT", None, "commit recorded in bench/RESULTS.md (default: git HEAD)",
           "bench/gpu.py"),
    EnvVar("MLIRCAP_OPINFO_INPUTS", None, "set by bench/opinfo.py --inputs reference for its "
           "sample workers: sweep OpInfo's reference_inputs instead of sample_inputs", "bench/opinfo.py"),
)


def env(name: str) -> str | None:
    """The value of a listed MLIRCAP_* variable, or its default."""
    return os.environ.get(name, ENV[name].default)


def env_flag(name: str) -> bool:
    """A listed on/off variable: unset means its default; 0, false, no and "" mean off."""
    return (env(name) or "").strip().lower() not in ("0", "", "false", "no")


def cache_dir() -> Path:
    """MLIRCAP_CACHE_DIR, else $XDG_CACHE_HOME/mlircap, else ~/.cache/mlircap."""
    d = env("MLIRCAP_CACHE_DIR")
    if d:
        return Path(d)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlircap"


# Variables the C++ core's code generation reads (getenv): part of the CPU and GPU cache
# keys, so code compiled under one setting is not loaded under another.
CODEGEN_ENV = ("MLIRCAP_CASCADE_SUMS",)


def codegen_settings() -> str:
    return ";".join(f"{k}={os.environ.get(k, '')}" for k in CODEGEN_ENV)


_FINGERPRINT: list[str] = []


def code_fingerprint() -> str:
    """A hash of this package's Python sources, part of every on-disk cache key: an entry
    stored by other code (an older checkout, another installed version) with the same core
    build and the same IR is a miss. How the runtime reads a cached plan (buffer reuse,
    output views, the calls around it) lives in these sources, not in the core, so a plan
    stored by one version is not necessarily read right by another. About 4 ms, once."""
    if not _FINGERPRINT:
        import hashlib

        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode() + b"\0")
            h.update(f.read_bytes())
        _FINGERPRINT.append(h.hexdigest())
    return _FINGERPRINT[0]


def markdown_table() -> str:
    """The README's table of environment variables."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for v in ENV.values():
        default = "unset" if v.default is None else f"`{v.default}`" if v.default else '`""`'
        rows.append(f"| `{v.name}` | {default} | {v.meaning} |")
    return "\n".join(rows)
