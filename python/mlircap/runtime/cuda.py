"""CUDA executor: runs a launch plan produced by the compiler core.

The plan (schema.py) lists values (inputs, intermediate
buffers, views, constants) and steps: kernel launches of PTX the core
generated, and library calls (matmul, conv) that run through torch
(cuBLAS/cuDNN). Buffers come from torch's caching allocator; every launch
goes to torch's current stream. Kernels are launched from C++ (the binding's
LaunchProgram) in runs between library calls.

With static shapes the whole plan is captured once as a CUDA graph and
replayed: inputs that keep their address between calls (parameters, buffers)
are used in place, the others are copied into static buffers first.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import operator
import os
import threading
from collections import ChainMap
from pathlib import Path

import torch

from .. import config, logs
from .._core import core
from .plan import PlanError, PlanExecutor, plan_input_ir
from .schema import KernelStep, Plan

# -- compile cache ---------------------------------------------------------------------------------

def cache_dir() -> Path:
    return config.cache_dir()


def _cache_key(linalg_ir: str, chip: str, features: str) -> str:
    h = hashlib.sha256()
    c = core()   # the build id too: a rebuilt core with the same version must not load old plans
    for part in (c.version(), c.build_id(), config.code_fingerprint(), config.codegen_settings(), chip, features, linalg_ir):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load_cached_plan(key: str) -> Plan | None:
    """The cached plan, parsed and checked, or None. An entry whose checksum does
    not match (truncated, corrupted) or whose body is not a valid launch plan
    (schema.Plan.from_json) is removed and reported as a miss."""
    path = cache_dir() / f"{key}.plan"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, _, body = data.partition(b"\n")
    problem = None
    if head != hashlib.sha256(body).hexdigest().encode():
        problem = "checksum mismatch"
    else:
        try:   # a valid checksum over a bad body (written by a buggy or foreign writer)
            plan = Plan.from_json(json.loads(body.decode()))
        except PlanError as e:
            problem = f"not a launch plan: {e}"
        except (UnicodeDecodeError, ValueError) as e:
            problem = f"unreadable ({type(e).__name__})"
    if problem:
        logs.log("progress", f"compile cache: bad entry {path.name} ({problem}) removed, recompiling")
        path.unlink(missing_ok=True)
        return None
    return plan


def store_cached_plan(key: str, plan: str) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        body = plan.encode()
        tmp = d / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"   # (one per writer)
        tmp.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        tmp.replace(d / f"{key}.plan")   # atomic: readers never see half an entry
    except OSError as e:
        logs.log("progress", f"compile cache: cannot write ({e})")


def compile_plan(linalg_ir: str, chip: str = config.DEFAULT_CHIP, features: str = config.DEFAULT_PTX_FEATURES) -> tuple[Plan, bool]:
    """(plan, cache_hit). Codegen runs only on a cache miss."""
    linalg_ir = plan_input_ir(linalg_ir, "cuda")
    key = _cache_key(linalg_ir, chip, features)
    plan = load_cached_plan(key)
    hit = plan is not None
    if not hit:
        text = core().gpu_compile(linalg_ir, chip, features)
        plan = Plan.from_json(json.loads(text))   # checked before it is cached
        store_cached_plan(key, text)
    logs.log("progress", f"compile cache {'hit' if hit else 'miss'} ({key[:12]})")
    return plan, hit


# -- execution -------------------------------------------------------------------------------------

_data_ptr = torch.Tensor.data_ptr
_dtype_of = operator.attrgetter("dtype")


_GET_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_stream() -> int:
    """The current CUDA stream's handle (what torch.cuda.current_stream().cuda_stream
    gives, without building a Stream object: a few microseconds per call)."""
    if _GET_RAW_STREAM is None:
        return torch.cuda.current_stream().cuda_stream
    return _GET_RAW_STREAM(torch._C._cuda_getDevice())


def _data_ptrs(idx: list[int], tensors: list):
    """The capture extension's DataPtrs check of `tensors` at positions `idx` (the
    static inputs' addresses and dtypes in one C call: BERT's 200 parameters cost
    ~40 us a replay in Python), or None while the extension is not built."""
    try:
        from ..capture import _tensor_ext
        mod = _tensor_ext.load()
        if mod is None or not hasattr(mod, "DataPtrs"):
            return None
        return mod.DataPtrs(tuple(idx), tuple(tensors))
    except Exception:  # noqa: BLE001 - the Python check states the same fact
        return None


class _NoGraph:
    """Stands in for a CUDA graph with nothing to capture."""

    def replay(self):
        pass


class _StaticInputs:
    """Inputs a CUDA graph uses in place (parameters, buffers), shared by the
    graphs of one plan (GpuExecutable) and of a split graph (WholeGraph)."""

    def _set_static(self, args, static: list[int]):
        self._static_inputs = [(i, args[i].data_ptr(), args[i].dtype) for i in static]
        # the replay check without a Python frame per input (BERT: ~200 parameters)
        self._static_idx = list(static)
        self._static_ptrs = [p for _, p, _ in self._static_inputs]
        self._static_dtypes = [d for _, _, d in self._static_inputs]
        self._static_check = _data_ptrs(self._static_idx, [args[i] for i in static])
        self._static_retries = 1000   # replays that try for the C check again (it builds in the background)

    def _static_match(self, args) -> bool:
        """The replay fast path's input check: inputs used in place by the graph
        (parameters, buffers) still have the address and dtype they had at
        capture. Capture checked device and layout; a tensor keeping its
        storage address and dtype keeps them too, short of reassigning `.data`
        to a view of the same storage. Per input this costs two attribute
        reads, which matters with hundreds of parameters (BERT: 200)."""
        if self._static_check is not None:    # one C call (capture/_tensor_meta.cpp)
            return self._static_check.match(args)
        sel = list(map(args.__getitem__, self._static_idx))
        ok = list(map(_data_ptr, sel)) == self._static_ptrs and list(map(_dtype_of, sel)) == self._static_dtypes
        if ok and self._static_retries > 0:   # the extension may have been built since capture
            self._static_retries -= 1
            self._static_check = _data_ptrs(self._static_idx, sel)
        return ok

    def _note_moved(self, args):
        """An input taken as fixed at capture moved (an intermediate tensor from
        eager code before this graph whose address repeated by chance): it is
        copied into the graph from now on."""
        self._unstable.update(i for i, p, d in self._static_inputs
                              if args[i].data_ptr() != p or args[i].dtype is not d)


class GpuExecutable(PlanExecutor, _StaticInputs):
    """Executes one compiled graph on the current CUDA device."""

    def __init__(self, linalg_ir: str, chip: str = config.DEFAULT_CHIP, features: str = config.DEFAULT_PTX_FEATURES,
                 cuda_graphs: bool | None = None):
        self._core = core()
        plan, self.cache_hit = compile_plan(linalg_ir, chip, features)
        super().__init__(plan, torch.device("cuda", torch.cuda.current_device()))
        if cuda_graphs is None:
            cuda_graphs = config.env_flag("MLIRCAP_CUDA_GRAPHS")
        self.use_graphs = cuda_graphs
        self._build_program()
        self._calls = 0
        self._graph = None
        self._unstable = set()   # inputs whose address changed after a capture: copied in
        self._transient = frozenset()   # output positions the caller consumes before the next call

    def set_transient_outputs(self, positions) -> None:
        """Outputs (positions) the caller copies elsewhere before this executable runs again
        (the new values of inputs a graph writes: backend._hoist_input_copies). A CUDA graph
        replay returns them as the graph's own buffers, without a clone, and they do not
        end the captured part of the plan."""
        if self._graph is not None:
            raise RuntimeError("set_transient_outputs after a CUDA graph was captured")
        self._transient = frozenset(positions)

    def _build_program(self):
        """Kernel launches as a C++ LaunchProgram, indexed by the plan's steps."""
        if self.n_kernels and not self.plan.ptx:
            raise PlanError("GPU launch plan: kernels but no PTX")
        module = self._core.cuda_load_module(self.plan.ptx) if self.n_kernels else None
        self.program = self._core.LaunchProgram()
        self.exec_steps = []        # per plan step: ("kernel", program index) | ("library", step)
        self.launch_grids = []      # per kernel launch: the grid it runs with
        functions = {}
        for step in self.plan.steps:
            if isinstance(step, KernelStep):
                name = step.name
                if name not in functions:
                    functions[name] = self._core.cuda_get_function(module, name, step.smem)
                consts, slots = [], []
                for a in step.args:
                    if a.value is not None:
                        consts.append(0)
                        slots.append(a.value)
                    else:
                        consts.append(a.i64)
                        slots.append(-1)
                n = len(self.program)
                grid = self._launch_grid(step, functions[name])
                self.launch_grids.append(grid)
                self.program.add(functions[name], grid, list(step.block), step.smem, consts, slots)
                self.exec_steps.append(("kernel", n))
            else:
                self.exec_steps.append(("library", step))

    def _launch_grid(self, step: KernelStep, fn) -> list[int]:
        """A grid-stride kernel runs in one wave: as many blocks as fit on the device at
        once (registers and shared memory decide, known once the module is loaded), at most
        the plan's grid. More would run their whole share of the loop after the first wave."""
        grid = list(step.grid)
        if step.grid_stride:
            try:
                per_sm = self._core.cuda_blocks_per_sm(fn, step.block[0] * step.block[1] * step.block[2], step.smem)
            except (AttributeError, RuntimeError) as e:   # a binding without the query: the plan's grid is correct too
                logs.log("progress", f"kernel {step.name}: no occupancy query ({e}); launching the plan's grid")
                return grid
            sms = torch.cuda.get_device_properties(self.device).multi_processor_count
            if per_sm > 0:
                grid[0] = max(1, min(grid[0], per_sm * sms))
        return grid

    def _table(self, t):
        return [t[v.id].data_ptr() for v in self.values]   # table slot = value id

    def _run(self, t, stream, begin: int = 0, end: int | None = None, table=None):
        """Runs plan steps [begin, end): kernel runs through the C++ program,
        library calls through torch."""
        if table is None:
            table = self._table(t)
        end = len(self.exec_steps) if end is None else end
        i = begin
        while i < end:
            kind, what = self.exec_steps[i]
            if kind == "kernel":
                j = i
                while j + 1 < end and self.exec_steps[j + 1][0] == "kernel":
                    j += 1
                self.program.run(table, stream, what, self.exec_steps[j][1] + 1)
                i = j + 1
            else:
                self._run_library(what, t)
                i += 1

    def _tail_start(self):
        """First step that produces (part of) an output. Steps from there on run
        outside the CUDA graph, into fresh buffers, so outputs need no copy."""
        producer = {}
        for i, step in enumerate(self.plan.steps):
            ids = step.value_args if isinstance(step, KernelStep) else (*step.ins, step.out)
            for vid in ids:
                producer.setdefault(self._base_of(vid), i)
        starts = [producer[self._base_of(o)] for j, o in enumerate(self.outputs) if j not in self._transient
                  and self.values[self._base_of(o)].kind == "buffer" and self._base_of(o) in producer]
        return min(starts) if starts else len(self.exec_steps), producer

    @torch.no_grad()
    def profile(self, *args, repeats: int = 5):
        """Per-step timings (ms, median over `repeats`), slowest first:
        [(description, ms)]. Runs step by step with CUDA events, without graphs."""
        ins = self._prepare_inputs(args)
        t = self._materialize(ins)
        stream = torch.cuda.current_stream()
        table = self._table(t)
        descr, samples = list(self.exec_steps), []
        for _ in range(repeats):
            times = []
            for kind, item in descr:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                if kind == "kernel":
                    self.program.run(table, stream.cuda_stream, item, item + 1)
                else:
                    self._run_library(item, t)
                end.record()
                times.append((start, end))
            torch.cuda.synchronize()
            samples.append([a.elapsed_time(b) for a, b in times])
        out = []
        for j, (kind, item) in enumerate(descr):
            ms = sorted(x[j] for x in samples)[len(samples) // 2]
            name = self.describe_kernel(self.kernel_steps[item]) if kind == "kernel" else self.describe_library(item)
            out.append((name, ms))
        return sorted(out, key=lambda x: -x[1])

    def __call__(self, *args):
        self._calls += 1
        if any(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in args):
            # a CPU tensor input (plan._host_input_ok) is copied to the GPU on every call,
            # which a CUDA graph cannot replay: this call runs step by step
            t = self._materialize(self._prepare_inputs(args))
            self._run(t, _raw_stream())
            return self._outputs(t)
        if self._graph is not None:
            if self._static_match(args):
                return self._replay(args)
            self._note_moved(args)
        ins = self._prepare_inputs(args)
        if not self.use_graphs or self._calls == 1:
            if self._calls == 1:
                self._first_ptrs = [x.data_ptr() for x in ins]
            t = self._materialize(ins)
            self._run(t, _raw_stream())
            return self._outputs(t)
        self._captures = getattr(self, "_captures", 0) + 1
        if self._captures > 3:   # parameters keep moving: graphs do not pay off
            logs.log("kernels", "CUDA graph recaptured 3 times; running without graphs")
            self.use_graphs, self._graph = False, None
            return self(*args)
        try:
            self._capture(ins)
        except Exception as e:  # noqa: BLE001 - a plan that cannot be captured runs step by step
            # (a library call that synchronizes with the host or copies from CPU memory)
            logs.log("kernels", f"CUDA graph capture failed ({type(e).__name__}: {str(e).strip()[:200]}); "
                                "running without graphs")
            self.use_graphs, self._graph = False, None
            return self(*args)
        return self._replay(ins)

    # Below this many bytes of outputs, copying them out of the graph costs less
    # than running the plan's tail (steps from the first one that writes an
    # output) step by step from Python after the replay.
    _TAIL_STEP_S = 8e-6        # host time of one plan step run from Python
    _COPY_BYTES_PER_S = 2e12   # device-to-device clone
    _CLONE_S = 3e-6            # host time of one clone (allocation and a launch)

    def _capture_tail(self, tail: int) -> bool:
        """Whether the whole plan goes into the graph, outputs cloned after each
        replay, instead of stopping the graph at `tail`."""
        n_tail = len(self.exec_steps) - tail
        if n_tail <= 1:
            return False
        bases = [self.values[self._base_of(o)] for j, o in enumerate(self.outputs) if j not in self._transient]
        out_bytes = sum(v.nbytes for v in bases)
        return out_bytes / self._COPY_BYTES_PER_S + len(bases) * self._CLONE_S < (n_tail - 1) * self._TAIL_STEP_S

    def _replay(self, args):
        for i, buf in self._dynamic_inputs:
            x = args[i]
            self._check_input(self.inputs[i], x)
            if x.shape != buf.shape:       # copy_ would broadcast
                raise PlanError(f"input {i}: expected shape {tuple(buf.shape)}, got {tuple(x.shape)}")
            buf.copy_(x)
        self._graph.replay()
        if self._tail == len(self.exec_steps):        # outputs are inputs/constants
            return [o if j in self._transient else o.clone() for j, o in enumerate(self._graph_outputs)]
        # Steps after the graph write fresh buffers: only their table slots change
        # (the graph has its own pointers baked in), so one table is reused.
        fresh, table = {}, self._tail_table
        for vid, shape, dtype in self._tail_alloc:
            b = torch.empty(shape, dtype=dtype, device=self.device)
            fresh[vid] = b
            table[vid] = b.data_ptr()
        for v in self._tail_views:
            table[v.id] = self._view(v, fresh).data_ptr()
        t = ChainMap(fresh, self._graph_tensors)
        self._run(t, _raw_stream(), self._tail, None, table)
        return [fresh[o] if o in fresh else self._graph_tensors[o] if j in self._transient
                else self._graph_tensors[o].clone() for j, o in enumerate(self.outputs)]

    def _capture(self, ins):
        """Capture the whole plan as one CUDA graph (static shapes)."""
        static, dynamic, graph_ins = [], [], []
        for i, x in enumerate(ins):
            if self._first_ptrs and x.data_ptr() == self._first_ptrs[i] and i not in self._unstable:
                static.append((i, x.data_ptr()))
                graph_ins.append(x)
            else:
                buf = torch.empty_like(x)
                buf.copy_(x)
                dynamic.append((i, buf))
                graph_ins.append(buf)
        self._set_static(ins, [i for i, _ in static])
        self._dynamic_inputs = dynamic
        t = self._materialize(graph_ins)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):          # warm-up outside capture (cuBLAS workspaces)
            self._run(t, side.cuda_stream)
        torch.cuda.current_stream().wait_stream(side)
        tail, producer = self._tail_start()
        if self._capture_tail(tail):
            tail = len(self.exec_steps)
        if tail == 0:                          # the first step already writes an output
            g = _NoGraph()
        else:
            g = torch.cuda.CUDAGraph()
            with _capturing(g):
                self._run(t, torch.cuda.current_stream().cuda_stream, 0, tail)
        self._graph, self._graph_tensors, self._tail = g, t, tail
        self._tail_table = self._table(t)
        tail_buffers = [v for v in self.buffers if producer.get(v.id, -1) >= tail]
        self._tail_alloc = [(v.id, v.shape, v.torch_dtype) for v in tail_buffers]
        fresh = {v.id for v in tail_buffers}
        self._tail_views = [v for v in self.views if v.of in fresh]
        self._graph_outputs = [t[o] for o in self.outputs]
        logs.log("kernels", f"captured CUDA graph: {tail} of {len(self.exec_steps)} steps (the rest write "
                            f"fresh outputs each call), {self.n_kernels} kernels, "
                            f"{self.n_library} library calls, "
                            f"{len(static)} static / {len(dynamic)} copied inputs")


@contextlib.contextmanager
def _capturing(g):
    """torch.cuda.graph(g), with the caller's stream made current again and the device
    synchronized when the capture fails: torch's context manager leaves its capture stream
    current when capture_end raises, and the eager rerun of the graph after the failure then
    ran on that stream, unordered with the caller's (a wrong result on the H200: mixup with a
    CPU permutation, bench/modules.py --device cuda)."""
    stream = torch.cuda.current_stream()
    try:
        with torch.cuda.graph(g):
            yield
    except BaseException:
        torch.cuda.set_stream(stream)
        torch.cuda.synchronize()
        raise


class WholeGraph(_StaticInputs):
    """A graph split into compiled parts and eager islands (partition.py) run on
    CUDA as one CUDA graph: the parts' plans and the islands' torch calls (fused
    attention, index ops) are captured together on the second call and replayed,
    instead of one graph replay per part with the islands launched from Python
    in between.

    `run(*args) -> outputs` runs the parts; `executables` are the compiled
    parts' GpuExecutables, which stop capturing graphs of their own (a capture
    cannot nest). Inputs that keep their address between the first two calls
    (parameters, buffers) are used in place, the others are copied into static
    buffers, and outputs are cloned out of the graph's memory after each
    replay. Anything that cannot be captured (a host synchronization, a CPU
    tensor in an island) leaves the graph running part by part, as before."""

    def __init__(self, run, executables: list):
        self.run = run
        self.executables = executables
        for e in executables:
            e.use_graphs = False
        self.active = True
        self._calls = 0
        self._captures = 0
        self._graph = None
        self._unstable: set[int] = set()

    def _disable(self, why: str):
        logs.log("kernels", f"whole-graph CUDA graph off ({why}): parts replay their own graphs")
        self.active, self._graph = False, None
        for e in self.executables:
            e.use_graphs = config.env_flag("MLIRCAP_CUDA_GRAPHS")

    def __call__(self, *args):
        if not self.active:
            return self.run(*args)
        self._calls += 1
        if self._graph is not None:
            if self._static_match(args):
                return self._replay(args)
            self._note_moved(args)
        if not all(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            self._disable("an input is not a CUDA tensor")
            return self.run(*args)
        if self._calls == 1:
            self._first_ptrs = [a.data_ptr() for a in args]
            return self.run(*args)
        self._captures += 1
        if self._captures > 3:
            self._disable("inputs keep moving")
            return self.run(*args)
        try:
            self._capture(args)
        except Exception as e:  # noqa: BLE001 - an uncapturable graph runs part by part
            self._disable(f"{type(e).__name__}: {str(e).strip()[:200]}")
            return self.run(*args)
        return self._replay(args)

    def _capture(self, args):
        static, dynamic, graph_ins = [], [], []
        for i, x in enumerate(args):
            if x.data_ptr() == self._first_ptrs[i] and i not in self._unstable:
                static.append(i)
                graph_ins.append(x)
            else:
                buf = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                buf.copy_(x)
                dynamic.append((i, buf))
                graph_ins.append(buf)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        # The warm-up's random islands must not advance the generators (the CPU's
        # too: randperm without a device): this call's draws are the replay's, as
        # eager's would be; a capture that fails leaves them as they were, for the
        # part-by-part run that follows.
        from ..capture.rng import _rng_states, _set_rng_states

        rng = _rng_states()
        try:
            with torch.cuda.stream(side):          # warm-up outside capture (library workspaces)
                self.run(*graph_ins)
            torch.cuda.current_stream().wait_stream(side)
            _set_rng_states(rng)
            g = torch.cuda.CUDAGraph()
            with _capturing(g):
                out = self.run(*graph_ins)
        except BaseException:
            _set_rng_states(rng)
            raise
        self._single = not isinstance(out, (list, tuple))
        outs = [out] if self._single else list(out)
        # An output that is a static input is returned as it is; graph memory is cloned.
        ins_by_id = {id(x): x for i, x in enumerate(graph_ins) if i in static}
        self._outs = [(o, isinstance(o, torch.Tensor) and id(o) not in ins_by_id) for o in outs]
        self._graph, self._dynamic = g, dynamic
        self._set_static(args, static)
        logs.log("kernels", f"captured the partitioned graph as one CUDA graph: {len(static)} static / "
                            f"{len(dynamic)} copied inputs, {len(outs)} outputs")

    def _replay(self, args):
        for i, buf in self._dynamic:
            x = args[i]
            if x.shape != buf.shape or x.stride() != buf.stride() or x.dtype != buf.dtype:
                return self.run(*args)   # not what was captured (guards make this rare)
        for i, buf in self._dynamic:
            buf.copy_(args[i])
        self._graph.replay()
        res = [o.clone() if fresh else o for o, fresh in self._outs]
        return res[0] if self._single else res
