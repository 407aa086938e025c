"""CPU executor: kernels JIT-compiled by the core, run from C++.

`CpuPlanExecutable` runs a launch plan: fused kernels compiled for the host,
library ops (matmul, conv) through torch (MKL/oneDNN). Each run of kernels
between library ops is one C++ call (the binding's CpuProgram: memref
descriptors prepared from the plan's static shapes, filled with a table of
data pointers). `CpuExecutable` JIT-compiles the whole graph as one function
of loops (debugging). Kernels take their results as trailing out-parameters:
outputs are allocated here by torch and written in place.

Compiled code is cached on disk (`config.cache_dir()`, off with
MLIRCAP_CPU_CACHE=0): the object file and the plan, keyed by the core's build,
the host CPU and its features, the optimization level and the IR, with a
checksum; an entry that does not load is removed and compiled again. The
compile worker fills the cache, so the process running the graph only loads.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import math
import os
import threading

import torch

from .. import config, logs
from .._core import core
from .plan import LIBRARY, PlanError, PlanExecutor, mark_round_once, out_variant, plan_input_ir
from .schema import KernelStep, Plan

_threads = [0]   # the core's thread count, as last set from here


def sync_threads(core_module) -> None:
    """Kernels use as many threads as torch (torch.set_num_threads)."""
    n = torch.get_num_threads()
    if n != _threads[0]:
        core_module.set_num_threads(n)
        _threads[0] = n


def contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return strides[::-1]


# -- compile cache ---------------------------------------------------------------------------------

def _cache_key(kind: str, linalg_ir: str, opt_level: int) -> str:
    c = core()
    h = hashlib.sha256()
    for part in (c.version(), c.build_id(), config.code_fingerprint(), config.codegen_settings(), c.cpu_target(), kind, str(opt_level),
                 linalg_ir):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _entry_path(key: str):
    return config.cache_dir() / f"{key}.cpu"


def load_cached(key: str) -> tuple[Plan | None, bytes] | None:
    """(the checked launch plan, None for whole-graph code; object code) or None.
    An entry whose checksum does not match (truncated, corrupted) or whose body
    is not an entry is removed and reported as a miss."""
    path = _entry_path(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, _, body = data.partition(b"\n")
    plan, _, obj = body.partition(b"\0")   # JSON text holds no NUL byte
    problem = None
    if head != hashlib.sha256(body).hexdigest().encode():
        problem = "checksum mismatch"
    elif not obj.startswith(b"\x7fELF"):
        problem = "no object code"
    else:
        try:
            text = plan.decode()
            parsed = Plan.from_json(json.loads(text)) if text else None
        except PlanError as e:
            problem = f"not a launch plan: {e}"
        except (UnicodeDecodeError, ValueError, TypeError) as e:
            problem = f"unreadable plan ({type(e).__name__})"
    if problem:
        drop_cached(key, problem)
        return None
    return parsed, obj


def drop_cached(key: str, problem: str) -> None:
    path = _entry_path(key)
    logs.log("progress", f"CPU compile cache: bad entry {path.name} ({problem}) removed, recompiling")
    path.unlink(missing_ok=True)


def store_cached(key: str, plan: str, obj: bytes) -> None:
    d = config.cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        body = plan.encode() + b"\0" + obj
        tmp = d / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        tmp.replace(_entry_path(key))   # atomic: readers never see half an entry
    except OSError as e:
        logs.log("progress", f"CPU compile cache: cannot write ({e})")


def _kernel_names(plan: Plan) -> list[str]:
    return sorted({s.name for s in plan.kernels})


def compile_cpu(linalg_ir: str, opt_level: int = config.DEFAULT_CPU_OPT_LEVEL, plan: bool = True):
    """(engine, schema.Plan or None, {function name: address}, cache_hit).

    plan=True: the launch plan's kernels (mlircap_cpu_plan_compile); False: the
    whole graph as one function `main` (mlircap_cpu_compile). A cached entry
    is used when every function it should hold links; otherwise it is removed
    and the IR compiled again."""
    c = core()
    linalg_ir = plan_input_ir(linalg_ir, "cpu") if plan else mark_round_once(linalg_ir)
    use_cache = config.env_flag("MLIRCAP_CPU_CACHE")
    key = _cache_key("plan" if plan else "whole", linalg_ir, opt_level) if use_cache else None
    entry = load_cached(key) if use_cache else None
    if entry is not None:
        parsed, obj = entry
        try:
            if plan and parsed is None:
                raise ValueError("a whole-graph entry under a plan key")
            names = _kernel_names(parsed) if plan else ["main"]
            engine = c.cpu_load(obj)
            fns = {n: engine.lookup(n) for n in names}
            logs.log("progress", f"CPU compile cache hit ({key[:12]})")
            return engine, parsed, fns, True
        except (RuntimeError, ValueError, KeyError, TypeError) as e:   # PlanError is a RuntimeError
            drop_cached(key, f"does not load: {str(e).strip()[:200]}")
    if plan:
        engine, text = c.cpu_plan_compile(linalg_ir, opt_level)
        parsed = Plan.from_json(json.loads(text))
        names = _kernel_names(parsed)
    else:
        engine, text, parsed, names = c.cpu_compile(linalg_ir, opt_level), "", None, ["main"]
    fns = {n: engine.lookup(n) for n in names}
    if use_cache:
        store_cached(key, text, engine.object())
        logs.log("progress", f"CPU compile cache miss ({key[:12]})")
    return engine, parsed, fns, False


# -- execution -------------------------------------------------------------------------------------

class CpuExecutable:
    """The whole graph JIT-compiled as one function of loops (debugging)."""

    def __init__(self, linalg_ir: str, func_name: str, outputs: list[tuple[tuple[int, ...], torch.dtype]],
                 opt_level: int = 3):
        self._core = core()
        if func_name == "main":
            self.engine, _, fns, self.cache_hit = compile_cpu(linalg_ir, opt_level, plan=False)
            self.fn = fns["main"]
        else:
            self.engine, self.cache_hit = self._core.cpu_compile(linalg_ir, opt_level), False
            self.fn = self.engine.lookup(func_name)
        self.outputs = [(tuple(s), d, contiguous_strides(s)) for s, d in outputs]

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        args = []
        keep = []
        for t in inputs:
            if not t.is_contiguous():
                t = t.contiguous()
            keep.append(t)
            args.append((t.data_ptr(), tuple(t.shape), contiguous_strides(t.shape)))
        outs = []
        for shape, dtype, strides in self.outputs:
            o = torch.empty(shape, dtype=dtype)
            outs.append(o)
            args.append((o.data_ptr(), shape, strides))
        sync_threads(self._core)
        self._core.call_packed(self.fn, args)
        return outs


_data_ptr = torch.Tensor.data_ptr

# out_variant's operands as expressions of the step's inputs, written into the generated call
# (test_call_overhead compares it with _call_generic, which calls out_variant): (op, number of inputs)
_OPERANDS = {("matmul", 2): "{0}, {1}", ("matmul_transpose_b", 2): "{0}, {1}.t()",
             ("matmul_transpose_a", 2): "{0}.t(), {1}", ("batch_matmul", 2): "{0}, {1}",
             ("batch_matmul_transpose_b", 2): "{0}, {1}.transpose(1, 2)",
             ("matmul", 3): "{2}, {0}, {1}", ("matmul_transpose_b", 3): "{2}, {0}, {1}.t()"}

# Library ops without an out= form (convolutions): their result tensor becomes the plan's
# value (its pointer replaces the buffer's in the table) instead of being copied into a
# buffer allocated for it: one pass over the result less per call.
_REBOUND = ("conv2d_nchw_fchw", "conv2d_depthwise_nchw_chw", "conv2d_nhwc_fhwc", "conv2d_depthwise_nhwc_hwc")


def _depthwise_call(step, values, constants) -> list[int] | None:
    """The params of mlircap_cpu_depthwise_conv2d for library step `step` ({has bias,
    strides, padding, dilations}), or None where the step is no float32 NCHW depthwise
    convolution on contiguous operands of consistent shapes (it then runs through torch).

    The core's kernel (lib/CAPI/Depthwise.cpp) runs as a step of the CPU program: through
    torch, oneDNN takes its generic path for plain NCHW depthwise convolutions (1 thread,
    Zen 3: 1x144x24x24 3x3 180-340 us against 45-90 us, 2x144x1x100 1x31 1.2-1.9 ms
    against 80-135 us) and the step was a Python call between two C++ runs of kernels."""
    if step.op != "conv2d_depthwise_nchw_chw" or len(step.ins) not in (2, 3):
        return None
    vals = [values[i] for i in step.ins] + [values[step.out]]
    if any(v.torch_dtype is not torch.float32 for v in vals) or vals[-1].kind != "buffer":
        return None
    for v in vals[:-1]:
        if v.kind == "view" and list(v.strides) != contiguous_strides(v.shape):
            return None
        if v.kind == "constant" and not constants[v.id].is_contiguous():
            return None
    x, w, y = vals[0].shape, vals[1].shape, vals[-1].shape
    sh, sw = step.strides or (1, 1)
    ph, pw = step.padding or (0, 0)
    dh, dw = step.dilations or (1, 1)
    if len(x) != 4 or len(w) != 3 or len(y) != 4 or min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        return None
    n, c, h, wd = x
    oh, ow = (h + 2 * ph - dh * (w[1] - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (w[2] - 1) - 1) // sw + 1
    if w[0] != c or tuple(y) != (n, c, oh, ow) or min(w[1], w[2], oh, ow) < 1 or \
            (len(step.ins) == 3 and tuple(vals[2].shape) != (c,)):
        return None
    return [int(len(step.ins) == 3), sh, sw, ph, pw, dh, dw]


def _share_by_liveness(plan: Plan, buffers: list) -> list[list[int]]:
    """`buffers` (plan values) grouped into slots of one memory each: buffers of one shape
    and dtype share a slot when no step uses two of them (a step's use of a view is a use
    of its base; a buffer lives from the first step that uses it to the last). Each slot
    lists its buffers by first use. Kernels take their pointers as noalias: two buffers
    one step uses are never in one slot. A backward graph's per-step products (an RNN's
    weight gradients, its gates) then write memory a step before them wrote and left,
    warm in cache, instead of a distinct buffer each."""
    ids = {v.id for v in buffers}
    first, last = {}, {}
    for k, step in enumerate(plan.steps):
        used = step.value_args if isinstance(step, KernelStep) else (*step.ins, step.out)
        for vid in used:
            b = plan.base_of(vid)
            if b in ids:
                first.setdefault(b, k)
                last[b] = k
    groups: dict[tuple, list] = {}
    for v in buffers:
        if v.id in first:
            groups.setdefault((tuple(v.shape), v.dtype), []).append(v.id)
    slots = [[v.id] for v in buffers if v.id not in first]   # (unused: a slot of its own)
    for vids in groups.values():
        free: list[tuple[int, int]] = []   # (last use, slot index) of the group's slots
        for vid in sorted(vids, key=lambda i: (first[i], i)):
            if free and free[0][0] < first[vid]:
                _, i = heapq.heappop(free)
                slots[i].append(vid)
            else:
                i = len(slots)
                slots.append([vid])
            heapq.heappush(free, (last[vid], i))
    return slots


# Bytes of intermediate buffers a CPU plan keeps between calls (CpuPlanExecutable._workspace_buffers):
# allocating a buffer costs about 1 µs of host time whatever its size, so small graphs gain most;
# large intermediates are allocated per call as eager does, not held while the graph is idle.
WORKSPACE_BYTES = 4 << 20

# Bytes of the larger per-call intermediates (`_LargeBuffers`) kept between calls, for all plans.
LARGE_BUFFER_BYTES = int(config.env("MLIRCAP_CPU_KEEP_MIB") or 0) << 20


class _LargeBuffers:
    """The intermediate buffers past a plan's workspace (no output is, or is a view of, one),
    taken per call from buffers earlier calls of any plan gave back, by shape and dtype:
    allocated per call, glibc handed their memory back to the OS at the free (trimming the heap
    top, or munmap) and each call faulted it in again, zeroed page by page:
    nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), batch 8, seq 128, 1 thread:
    1400-2800 minor page faults a call against eager's 0 (24.9 ms against 21.3). Kept up to
    LARGE_BUFFER_BYTES in all; a buffer given back past that is freed. Plans run one after the
    other share the memory, as eager's allocator reuses one's freed blocks for the next."""

    def __init__(self) -> None:
        self.free: dict[tuple, list[torch.Tensor]] = {}
        self.bytes = 0

    def take(self, key: tuple, new, sizes) -> torch.Tensor:
        kept = self.free.get(key)
        if kept:
            try:
                t = kept.pop()
            except IndexError:   # (another thread took the last one)
                pass
            else:
                self.bytes -= t.nbytes
                return t
        with torch.inference_mode(False):   # (given back, it is written with out= outside inference mode)
            return new(*sizes)

    def give(self, key: tuple, t: torch.Tensor) -> None:
        if self.bytes + t.nbytes <= LARGE_BUFFER_BYTES:
            self.bytes += t.nbytes
            self.free.setdefault(key, []).append(t)


_large = _LargeBuffers()


def _emulated_narrow(dtype: torch.dtype) -> bool:
    """bfloat16/float16 library steps (matmul, convolution) run as the float32 product of
    the converted operands, rounded once, where torch has no native kernel for the dtype on
    this host (partition.cpu_native_narrow_kernels): eager's own then converts in scalar
    loops (Zen 3, AVX2, 1 thread: bf16 mm 154x256x768 7.2 ms against 0.84 ms; both sum in
    float32 and round once)."""
    from ..partition import cpu_native_narrow_kernels

    return dtype in (torch.bfloat16, torch.float16) and not cpu_native_narrow_kernels(dtype)


def _in_f32(fn, dtype):
    """LIBRARY[op] computed on float32 operands, rounded to `dtype` once (_emulated_narrow)."""
    def run(ins, st):
        return fn([x.float() for x in ins], st).to(dtype)
    return run


def _into_f32(op):
    """An out= library op computed on float32 operands, rounded into `out` (_emulated_narrow)."""
    def run(*args, out):
        return out.copy_(op(*(x.float() for x in args)))
    return run


def _view_maker(shape, strides, offset, cell):
    """(base, its data pointer) -> the view; a view of a Parameter is remembered in `cell`
    (base, pointer, view), which the generated call reuses while the same Parameter with
    the same data pointer comes back (same pointer and sizes: the same view)."""
    shape, strides, offset = list(shape), list(strides), int(offset)

    def make(base, ptr):
        if not isinstance(base, torch.nn.Parameter):   # a view for this call only
            return base.as_strided(shape, strides, base.storage_offset() + offset)
        with torch.inference_mode(False):   # usable by calls in and out of inference mode
            view = base.as_strided(shape, strides, base.storage_offset() + offset)
        cell[0] = (base, ptr, view)
        return view
    return make


def _allocator(shape, dtype):
    """(function, args) allocating an empty contiguous CPU tensor: new_empty of a
    tensor of the dtype with sizes as separate arguments, which torch parses
    faster than torch.empty(shape_tuple, dtype=...) (about 2 µs against 3 µs)."""
    return torch.empty(0, dtype=dtype).new_empty, (tuple(shape) if len(shape) else ((),))


class CpuPlanExecutable:
    """Runs a CPU launch plan: fused kernels JIT-compiled by the core, library
    ops (matmul, conv) through torch (MKL/oneDNN), buffers from torch.

    Per call: inputs are checked (dtype, device) and made contiguous, buffers
    allocated, a table of data pointers (one per plan value) built, then each
    run of kernels between library ops is one CpuProgram.run call. Library steps
    the core computes itself (float32 NCHW depthwise convolutions: _depthwise_call)
    are calls of that program too."""

    def __init__(self, linalg_ir: str, opt_level: int = 3):
        self._core = core()
        self.engine, plan, fns, self.cache_hit = compile_cpu(linalg_ir, opt_level)
        self.exe = PlanExecutor(plan, torch.device("cpu"))
        self.plan = self.exe.plan
        self.n_kernels, self.n_library = self.exe.n_kernels, self.exe.n_library
        self._prepare(fns)

    def _prepare(self, fns):
        exe, values = self.exe, self.exe.values
        # views used by library ops or returned need tensors; the others only a pointer
        needed = {vid for s in self.plan.library_steps for vid in (*s.ins, s.out)}
        needed.update(exe.outputs)
        self._template = [None] * len(values)
        for vid, t in exe.constants.items():
            self._template[vid] = t
        self._inputs = [(v.id, v.index, v.torch_dtype, v) for v in exe.inputs]
        self._alloc = [(v.id, *_allocator(v.shape, v.torch_dtype)) for v in exe.buffers]
        self._views, self._ptr_views = [], []
        for v in exe.views:   # "of" is never itself a view (schema.Plan checks it)
            if v.id in needed:
                self._views.append((v.id, v.of, v.shape, v.strides, v.offset))
            else:
                self._ptr_views.append((v.id, v.of, v.offset * v.torch_dtype.itemsize))
        # library steps run by the core as steps of the program (_depthwise_call): id -> params
        self._native = {}
        native_fn = getattr(self._core, "cpu_depthwise_conv2d", None)   # None: a binding before it
        for step in self.plan.library_steps if native_fn is not None else ():
            params = _depthwise_call(step, values, exe.constants)
            if params is not None:
                self._native[id(step)] = params
        self._rebound = self._rebound_values()
        self._shared = {}     # workspace buffer id -> the one whose memory it uses (_share_by_liveness)
        self._workspace = self._workspace_buffers()
        self._view_cells = {}   # view id -> [(Parameter, its data pointer, the view)] (_view_maker)
        self.program = self._core.CpuProgram()
        self._segments = []   # (None, begin, end): kernels [begin, end) | (library step, 0, 0)
        self.labels = []      # per program call: the kernel's name, or the native library step's op
        for step in self.plan.steps:
            params = None if isinstance(step, KernelStep) else self._native.get(id(step))
            if isinstance(step, KernelStep) or params is not None:
                if params is not None:
                    fn, slots, label = native_fn(), [*step.ins, step.out], step.op
                else:
                    fn, slots, label = fns[step.name], [], step.name
                    for a in step.args:
                        if a.value is None:
                            raise PlanError(f"CPU kernel {step.name}: scalar arguments are not supported")
                        slots.append(a.value)
                shapes = [list(values[v].shape) for v in slots]
                n = len(self.program)
                if params is None:
                    self.program.add(fn, slots, shapes)
                else:
                    self.program.add(fn, slots, shapes, params)
                self.labels.append(label)
                if self._segments and self._segments[-1][0] is None:
                    self._segments[-1] = (None, self._segments[-1][1], n + 1)
                else:
                    self._segments.append((None, n, n + 1))
            else:
                self._segments.append((step, 0, 0))
        self._outputs = [(o, i in exe._copied) for i, o in enumerate(exe.outputs)]
        self._call = self._generate(first=True)

    def copy_aliased_outputs(self, roots: list) -> None:
        """PlanExecutor.copy_aliased_outputs, and the call function regenerated with it
        (before the first call)."""
        copied = self.exe.copy_aliased_outputs(roots)
        self._outputs = [(o, i in copied) for i, o in enumerate(self.exe.outputs)]
        self._call = self._generate(first=True)

    def _rebound_values(self) -> dict[int, list[int]]:
        """Buffers written by a library step without an out= form (_REBOUND) whose operands
        have the buffer's floating dtype: value id -> its views. The step's result is used
        as the value itself, not copied into a buffer."""
        exe, values = self.exe, self.exe.values
        views: dict[int, list[int]] = {}
        for v in exe.views:
            views.setdefault(v.of, []).append(v.id)
        rebound = {}
        for st in self.plan.library_steps:
            out = values[st.out]
            if id(st) in self._native:
                continue
            if st.op in _REBOUND and out.kind == "buffer" and out.torch_dtype.is_floating_point and \
                    all(values[i].dtype == out.dtype for i in st.ins):
                rebound[st.out] = views.get(st.out, [])
        return rebound

    def _workspace_buffers(self) -> set[int]:
        """Buffers kept from call to call instead of allocated per call: those no
        output is (a view of), smallest first while their memory sums to at most
        WORKSPACE_BYTES. Their contents never outlive a call, so a call reuses the
        buffers of an earlier one (a pool: concurrent calls take different sets).
        Buffers of one shape and dtype whose uses do not overlap share memory
        (`_share_by_liveness`, recorded in self._shared), counted once."""
        exe = self.exe
        returned = {exe._base_of(o) for o in exe.outputs}
        candidates = [v for v in exe.buffers if v.id not in returned and v.id not in self._rebound]
        slots = _share_by_liveness(self.plan, candidates)
        kept, total = set(), 0
        for slot in sorted(slots, key=lambda s: (self.exe.values[s[0]].nbytes, s[0])):
            n = self.exe.values[slot[0]].nbytes
            if total + n > WORKSPACE_BYTES:
                break
            kept.update(slot)
            total += n
            self._shared.update((vid, slot[0]) for vid in slot[1:])
        return kept

    def _new_workspace(self) -> tuple:
        """One set of workspace buffers: (buffer and view tensors..., their data pointers...)
        in the order the generated call unpacks them. Normal tensors, also when made in
        inference mode: library ops write them with out= in and out of it."""
        with torch.inference_mode(False):
            return self._make_workspace()

    def _make_workspace(self) -> tuple:
        tensors, shared = {}, self._shared
        for vid, new, sizes in self._alloc:
            if vid in self._workspace and vid not in shared:
                tensors[vid] = new(*sizes)
        for vid, owner in shared.items():
            tensors[vid] = tensors[owner]
        for vid, of, shape, strides, offset in self._views:
            if of in self._workspace:
                base = tensors[of]
                tensors[vid] = base.as_strided(shape, strides, base.storage_offset() + offset)
        order = sorted(tensors)
        return tuple(tensors[v] for v in order) + tuple(_data_ptr(tensors[v]) for v in order)

    def _reshaped_outputs(self, ws: set) -> dict:
        """Buffers an output reshapes whole (offset 0, contiguous strides, the buffer's elements):
        buffer id -> (that output's id, its allocator, whether the buffer's own tensor is still
        needed). The generated call allocates the output's tensor and takes the buffer's pointer
        from it: a training forward returns many such reshapes as saved activations ([B*T, D]
        matmul results as [B, T, D]), each an as_strided per call here and a detach of a view in
        aot_autograd's saving of it."""
        exe, values, rebound = self.exe, self.exe.values, self._rebound
        outputs = set(exe.outputs)
        allocated = {vid for vid, _, _ in self._alloc} - ws - set(rebound)
        lib = {vid for st in self.plan.library_steps for vid in (*st.ins, st.out)}
        views_of: dict[int, list] = {}
        for vid, of, shape, strides, offset in self._views:
            views_of.setdefault(of, []).append((vid, shape, strides, offset))
        generic = any(step is not None and step.out not in rebound and not (
            out_variant(step) is not None and values[step.out].kind == "buffer" and
            all(values[i].dtype == values[step.out].dtype for i in step.ins)) for step, _, _ in self._segments)
        found = {}
        for of, vs in views_of.items():
            if of not in allocated:
                continue
            base = values[of]
            for vid, shape, strides, offset in vs:
                v = values[vid]
                if vid in outputs and int(offset) == 0 and v.dtype == base.dtype and \
                        list(strides) == contiguous_strides(shape) and \
                        math.prod(int(d) for d in shape) == math.prod(int(d) for d in base.shape):
                    needed = generic or of in lib or of in outputs or len(vs) > 1
                    found[of] = (vid, _allocator(shape, v.torch_dtype), needed)
                    break
        return found

    def _generate(self, first: bool = False, tg=None):
        """The per-call work of `_call_generic` as one generated function of straight-line
        code: each value a local variable, buffer shapes and views' sizes as literals,
        matmuls into buffers as direct torch.mm/bmm calls with out=; no template list,
        no per-value loop.  Data pointers are computed once per value (a view's from
        its base's); buffers no output is (a view of) come from a pool of workspaces
        (`_workspace_buffers`) instead of being allocated, with their views made once;
        a convolution's result is the value itself (`_rebound_values`), its pointer and
        its views' written into the table after the step;
        a view of a Parameter input is made once and reused while that Parameter,
        with the same data pointer, is passed again.  `tg`: a TensorGuards of the
        inputs as the plan wants them (dtype, CPU, shape, contiguous strides; see
        _inputs_guard): inputs it accepts skip the per-input checks.  `first`: the
        function of the first call, which builds that guard and the function of
        later calls."""
        exe, values = self.exe, self.exe.values
        g = {"dp": _data_ptr, "sync": sync_threads, "core": self._core, "run": self.program.run,
             "CHK": exe._check_input, "RL": exe._run_library, "nthreads": torch.get_num_threads, "TH": _threads,
             "TG": tg, "UP": self._upgrade}
        checked = []
        for vid, i, dtype, v in self._inputs:
            g[f"D{vid}"], g[f"V{vid}"], g[f"Z{vid}"] = dtype, v, torch.Size(v.shape)
            checked += [f"x{vid} = A[{i}]",
                        f"if x{vid}.dtype is not D{vid} or not x{vid}.is_cpu or x{vid}.shape != Z{vid}: "
                        f"CHK(V{vid}, x{vid})",
                        f"if not x{vid}.is_contiguous(): x{vid} = x{vid}.contiguous()"]
        if tg is not None and self._inputs:
            body = [f"if TG.check({', '.join(f'A[{i}]' for _, i, _, _ in self._inputs)}):"]
            body += [f"    x{vid} = A[{i}]" for vid, i, _, _ in self._inputs]
            body += ["else:"] + ["    " + line for line in checked]
        else:
            body = checked
        body += [f"p{vid} = dp(x{vid})" for vid, _, _, _ in self._inputs]
        ws = self._workspace
        ws_values = sorted(ws | {vid for vid, of, *_ in self._views if of in ws})
        if ws_values:
            g["POOL"], g["NEWWS"] = [], self._new_workspace
            body.append("ws = POOL.pop() if POOL else NEWWS()")
            body.append(", ".join([f"x{v}" for v in ws_values] + [f"p{v}" for v in ws_values]) + " = ws")
        rebound = self._rebound
        reshaped = self._reshaped_outputs(ws)
        returned = {exe._base_of(o) for o in exe.outputs}
        large = []   # buffers taken from _large, given back at the end
        g["BIG"] = _large
        for vid, new, sizes in self._alloc:
            if vid in rebound:
                body += [f"x{vid} = None", f"p{vid} = 0"]
            elif vid in reshaped:   # allocated as the output that reshapes it (no view made per call)
                out, (onew, osizes), base_needed = reshaped[vid]
                g[f"N{out}"] = onew
                body.append(f"x{out} = N{out}({', '.join(repr(s) for s in osizes)})")
                body.append(f"p{vid} = dp(x{out})")
                if base_needed:
                    body.append(f"x{vid} = x{out}.view({list(values[vid].shape)!r})")
            elif vid not in ws and vid not in returned:   # (reused from call to call: _LargeBuffers)
                g[f"N{vid}"], g[f"KB{vid}"] = new, (tuple(values[vid].shape), values[vid].torch_dtype)
                body.append(f"x{vid} = BIG.take(KB{vid}, N{vid}, {tuple(sizes)!r})")
                body.append(f"p{vid} = dp(x{vid})")
                large.append(vid)
            elif vid not in ws:
                g[f"N{vid}"] = new
                body.append(f"x{vid} = N{vid}({', '.join(repr(s) for s in sizes)})")
                body.append(f"p{vid} = dp(x{vid})")
        for vid, t in self.exe.constants.items():
            g[f"K{vid}"] = t
            body.append(f"x{vid} = K{vid}")
            body.append(f"p{vid} = {_data_ptr(t)}")
        inputs = {vid for vid, _, _, _ in self._inputs}
        view_code = {}   # view id -> lines computing x{vid} (if needed) and p{vid} from its base
        for vid, of, shape, strides, offset in self._views:
            nbytes = int(offset) * values[vid].torch_dtype.itemsize
            if of in rebound:
                view_code[vid] = [
                    f"x{vid} = x{of}.as_strided({list(shape)!r}, {list(strides)!r}, x{of}.storage_offset() + "
                    f"{int(offset)})", f"p{vid} = p{of} + {nbytes}" if nbytes else f"p{vid} = p{of}"]
                body += [f"x{vid} = None", f"p{vid} = 0"]
                continue
            if of in ws:
                continue
            if of in reshaped and reshaped[of][0] == vid:
                body.append(f"p{vid} = p{of}")
                continue
            view = f"x{of}.as_strided({list(shape)!r}, {list(strides)!r}, x{of}.storage_offset() + {int(offset)})"
            if of in inputs:   # reused while the same Parameter (same data) comes back
                g[f"C{vid}"] = cell = self._view_cells.setdefault(vid, [(None, 0, None)])
                g[f"MV{vid}"] = _view_maker(shape, strides, offset, cell)
                body += [f"c = C{vid}[0]",
                         f"x{vid} = c[2] if c[0] is x{of} and c[1] == p{of} else MV{vid}(x{of}, p{of})"]
            else:
                body.append(f"x{vid} = {view}")
            body.append(f"p{vid} = p{of} + {nbytes}" if nbytes else f"p{vid} = p{of}")
        for vid, of, nbytes in self._ptr_views:
            line = f"p{vid} = p{of} + {nbytes}" if nbytes else f"p{vid} = p{of}"
            if of in rebound:
                view_code[vid] = [line]
                line = f"p{vid} = 0"
            body.append(line)
        ptr = {vid: of for vid, of, _ in self._ptr_views}
        body.append("table = [" + ", ".join(f"p{vid}" for vid in range(len(values))) + "]")
        body.append("if nthreads() != TH[0]: sync(core)")
        generic = False
        for k, (step, begin, end) in enumerate(self._segments):
            if step is None:
                body.append(f"run(table, {begin}, {end})")
                continue
            variant, ins, out = out_variant(step), step.ins, step.out
            emulated = _emulated_narrow(values[out].torch_dtype) and \
                all(values[i].dtype == values[out].dtype for i in ins)
            if out in rebound:
                # the result is the value: its pointer (and its views') go into the table
                g[f"S{k}"], g[f"F{k}"] = step, LIBRARY[step.op]
                if emulated:
                    g[f"F{k}"] = _in_f32(LIBRARY[step.op], values[out].torch_dtype)
                body += [f"x{out} = F{k}([{', '.join(f'x{i}' for i in ins)}], S{k})",
                         f"if not x{out}.is_contiguous(): x{out} = x{out}.contiguous()",
                         f"p{out} = dp(x{out})", f"table[{out}] = p{out}"]
                for v in rebound[out]:
                    body += view_code[v] + [f"table[{v}] = p{v}"]
                body.append(f"#T{out}")   # the value list's update, if there is one (below)
                continue
            if variant is not None and values[out].kind == "buffer" and \
                    all(values[i].dtype == values[out].dtype for i in ins):
                # what _run_library does for these: op(*operands(*ins), out=out) (a buffer
                # is contiguous, the operands have its dtype)
                g[f"L{k}"], g[f"O{k}"] = variant
                if emulated:
                    g[f"L{k}"] = _into_f32(variant[0])
                operands = _OPERANDS.get((step.op, len(ins)))
                operands = operands.format(*(f"x{i}" for i in ins)) if operands else \
                    f"*O{k}({', '.join(f'x{i}' for i in ins)})"
                body.append(f"L{k}({operands}, out=x{out})")
            else:
                g[f"S{k}"] = step
                body.append(f"RL(S{k}, t)")
                generic = True
        if generic:   # the value list _run_library reads (pointer-only views: their base)
            at = body.index("if nthreads() != TH[0]: sync(core)")
            body.insert(at, "t = [" + ", ".join(f"x{ptr[vid]}" if vid in ptr else f"x{vid}"
                                                for vid in range(len(values))) + "]")
        for out, vs in rebound.items():   # after the step that makes them, for the steps after it
            at = body.index(f"#T{out}")
            body[at:at + 1] = [f"t[{out}] = x{out}"] + [f"t[{v}] = x{ptr[v]}" if v in ptr else f"t[{v}] = x{v}"
                                                        for v in vs] if generic else []
        body.append("out = [" + ", ".join(f"x{o}.clone()" if const else f"x{o}" for o, const in self._outputs) + "]")
        if ws_values:
            body.append("POOL.append(ws)")
        body += [f"BIG.give(KB{vid}, x{vid})" for vid in large]
        if first:
            body.append("UP(A)")
        body.append("return out")
        src = "def _plan_call(*A):\n" + "".join(f"    {line}\n" for line in body)
        self.source = src
        exec(compile(src, "<mlircap cpu plan>", "exec"), g)
        return g["_plan_call"]

    def _upgrade(self, args: tuple) -> None:
        """After the first call: the function of later calls, with the inputs checked by
        one TensorGuards call where the first call's inputs allow it."""
        self._call = self._generate(tg=self._inputs_guard(args))

    def _inputs_guard(self, args: tuple):
        """TensorGuards accepting exactly the inputs the per-input checks pass unchanged:
        the plan's dtype on the CPU, contiguous, with the plan's shape; the Python type,
        requires_grad and dispatch keys of the first call's inputs (a later input that
        differs in those takes the per-input checks).  None without TensorGuards or when
        an input of the first call is not such a tensor."""
        try:
            from torch._C._dynamo.guards import TensorGuards
        except ImportError:   # pragma: no cover - older torch
            return None
        examples = []
        for _, i, dtype, v in self._inputs:
            x = args[i]
            shape = list(v.shape)
            if type(x) not in (torch.Tensor, torch.nn.Parameter) or x.dtype is not dtype or not x.is_cpu or \
                    list(x.shape) != shape or list(x.stride()) != contiguous_strides(shape) or \
                    x.layout is not torch.strided:
                return None
            examples.append(x)
        if not examples:
            return None
        return TensorGuards(*examples, dynamic_dims_sizes=[list(t.shape) for t in examples],
                            dynamic_dims_strides=[list(t.stride()) for t in examples])

    def __call__(self, *args) -> list[torch.Tensor]:
        return self._call(*args)

    def _call_generic(self, *args) -> list[torch.Tensor]:
        """What the generated `_call` does, step by step from the plan (the reference of
        the generated code: test_cpu_program compares them)."""
        t = self._template.copy()
        for vid, i, dtype, v in self._inputs:
            x = args[i]
            if x.dtype is not dtype or not x.is_cpu or tuple(x.shape) != tuple(v.shape):
                self.exe._check_input(v, x)
            t[vid] = x if x.is_contiguous() else x.contiguous()
        for vid, new, sizes in self._alloc:
            t[vid] = new(*sizes)
        for vid, of, shape, strides, offset in self._views:
            base = t[of]
            t[vid] = base.as_strided(shape, strides, base.storage_offset() + offset)
        for vid, of, _ in self._ptr_views:
            t[vid] = t[of]
        table = list(map(_data_ptr, t))
        for vid, _, nbytes in self._ptr_views:
            table[vid] += nbytes
        sync_threads(self._core)
        run = self.program.run
        for step, begin, end in self._segments:
            if step is None:
                run(table, begin, end)
            else:
                self.exe._run_library(step, t)
        return [t[o].clone() if const else t[o] for o, const in self._outputs]
