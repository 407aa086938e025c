"""CUDA executor: runs a launch plan produced by the compiler core.

The plan (JSON, see `GpuExecutable`) lists values (inputs, intermediate
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

import hashlib
import json
import os
from pathlib import Path

import torch

from .. import logs
from .._core import core
from .plan import PlanExecutor

# -- compile cache ---------------------------------------------------------------------------------

def cache_dir() -> Path:
    return Path(os.environ.get("MLIRCAP_CACHE_DIR", Path.home() / ".cache" / "mlircap"))


def _cache_key(linalg_ir: str, chip: str, features: str) -> str:
    h = hashlib.sha256()
    for part in (core().version(), chip, features, linalg_ir):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load_cached_plan(key: str) -> str | None:
    """The cached plan text, or None. An entry whose checksum does not match
    (truncated, corrupted) is removed and reported as a miss."""
    path = cache_dir() / f"{key}.plan"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, _, body = data.partition(b"\n")
    if head != hashlib.sha256(body).hexdigest().encode():
        logs.log("progress", f"compile cache: corrupted entry {path.name} removed, recompiling")
        path.unlink(missing_ok=True)
        return None
    return body.decode()


def store_cached_plan(key: str, plan: str) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        body = plan.encode()
        tmp = d / f".{key}.{os.getpid()}.tmp"
        tmp.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        tmp.replace(d / f"{key}.plan")   # atomic: readers never see half an entry
    except OSError as e:
        logs.log("progress", f"compile cache: cannot write ({e})")


def compile_plan(linalg_ir: str, chip: str = "sm_90", features: str = "+ptx80") -> tuple[dict, bool]:
    """(plan, cache_hit). Codegen runs only on a cache miss."""
    key = _cache_key(linalg_ir, chip, features)
    text = load_cached_plan(key)
    hit = text is not None
    if not hit:
        text = core().gpu_compile(linalg_ir, chip, features)
        store_cached_plan(key, text)
    logs.log("progress", f"compile cache {'hit' if hit else 'miss'} ({key[:12]})")
    return json.loads(text), hit


# -- execution -------------------------------------------------------------------------------------

class GpuExecutable(PlanExecutor):
    """Executes one compiled graph on the current CUDA device."""

    def __init__(self, linalg_ir: str, chip: str = "sm_90", features: str = "+ptx80",
                 cuda_graphs: bool | None = None):
        self._core = core()
        plan, self.cache_hit = compile_plan(linalg_ir, chip, features)
        super().__init__(plan, torch.device("cuda", torch.cuda.current_device()))
        if cuda_graphs is None:
            cuda_graphs = os.environ.get("MLIRCAP_CUDA_GRAPHS", "1") != "0"
        self.use_graphs = cuda_graphs
        self._build_program()
        self._calls = 0
        self._graph = None

    def _build_program(self):
        """Kernel launches as a C++ LaunchProgram; segments alternate kernel runs and library calls."""
        module = self._core.cuda_load_module(self.plan["ptx"]) if self.n_kernels else None
        self.program = self._core.LaunchProgram()
        self.segments = []          # ("kernels", begin, end) | ("library", step)
        functions = {}
        for step in self.plan["steps"]:
            if step["kind"] == "kernel":
                name = step["name"]
                if name not in functions:
                    functions[name] = self._core.cuda_get_function(module, name, step.get("smem", 0))
                consts, slots = [], []
                for a in step["args"]:
                    if "value" in a:
                        consts.append(0)
                        slots.append(self.slot[a["value"]])
                    else:
                        consts.append(int(a["i64"]))
                        slots.append(-1)
                n = len(self.program)
                self.program.add(functions[name], list(step["grid"]), list(step["block"]), step.get("smem", 0),
                                 consts, slots)
                if self.segments and self.segments[-1][0] == "kernels":
                    self.segments[-1] = ("kernels", self.segments[-1][1], n + 1)
                else:
                    self.segments.append(("kernels", n, n + 1))
            else:
                self.segments.append(("library", step))

    def _run(self, t, stream):
        table = [0] * len(self.slot)
        for vid, i in self.slot.items():
            table[i] = t[vid].data_ptr()
        for seg in self.segments:
            if seg[0] == "kernels":
                self.program.run(table, stream, seg[1], seg[2])
            else:
                self._run_library(seg[1], t)

    def profile(self, *args, repeats: int = 5):
        """Per-step timings (ms, median over `repeats`), slowest first:
        [(description, ms)]. Runs step by step with CUDA events, without graphs."""
        ins = self._prepare_inputs(args)
        t = self._materialize(ins)
        stream = torch.cuda.current_stream()
        table = [t[vid].data_ptr() for vid in self.slot]
        descr, samples = [], []
        for seg in self.segments:
            if seg[0] == "kernels":
                for i in range(seg[1], seg[2]):
                    descr.append(("kernel", i))
            else:
                descr.append(("library", seg[1]))
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
        ins = self._prepare_inputs(args)
        self._calls += 1
        if not self.use_graphs or self._calls == 1:
            if self._calls == 1:
                self._first_ptrs = [x.data_ptr() for x in ins]
            t = self._materialize(ins)
            self._run(t, torch.cuda.current_stream().cuda_stream)
            return [t[o] for o in self.outputs]
        if self._graph is None or any(ins[i].data_ptr() != p for i, p in self._static_inputs):
            self._captures = getattr(self, "_captures", 0) + 1
            if self._captures > 3:   # parameters keep moving: graphs do not pay off
                logs.log("kernels", "CUDA graph recaptured 3 times; running without graphs")
                self.use_graphs, self._graph = False, None
                return self(*args)
            self._capture(ins)
        for i, buf in self._dynamic_inputs:
            buf.copy_(ins[i])
        self._graph.replay()
        return [o.clone() for o in self._graph_outputs]

    def _capture(self, ins):
        """Capture the whole plan as one CUDA graph (static shapes)."""
        static, dynamic, graph_ins = [], [], []
        for i, x in enumerate(ins):
            if self._first_ptrs and x.data_ptr() == self._first_ptrs[i]:
                static.append((i, x.data_ptr()))
                graph_ins.append(x)
            else:
                buf = torch.empty_like(x)
                buf.copy_(x)
                dynamic.append((i, buf))
                graph_ins.append(buf)
        self._static_inputs, self._dynamic_inputs = static, dynamic
        t = self._materialize(graph_ins)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):          # warm-up outside capture (cuBLAS workspaces)
            self._run(t, side.cuda_stream)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self._run(t, torch.cuda.current_stream().cuda_stream)
        self._graph, self._graph_tensors = g, t
        self._graph_outputs = [t[o] for o in self.outputs]
        logs.log("kernels", f"captured CUDA graph: {self.n_kernels} kernels, "
                            f"{sum(1 for s in self.segments if s[0] == 'library')} library calls, "
                            f"{len(static)} static / {len(dynamic)} copied inputs")
