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

DTYPES = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "i1": torch.bool,
    "ui8": torch.uint8,
}


class PlanError(RuntimeError):
    pass


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

def _conv2d(x, w, attrs):
    return torch.nn.functional.conv2d(x, w, stride=attrs.get("strides", [1, 1]),
                                      dilation=attrs.get("dilations", [1, 1]))


LIBRARY = {
    "matmul": lambda ins, attrs: torch.mm(ins[0], ins[1]),
    "matmul_transpose_b": lambda ins, attrs: torch.mm(ins[0], ins[1].t()),
    "matmul_transpose_a": lambda ins, attrs: torch.mm(ins[0].t(), ins[1]),
    "batch_matmul": lambda ins, attrs: torch.bmm(ins[0], ins[1]),
    "batch_matmul_transpose_b": lambda ins, attrs: torch.bmm(ins[0], ins[1].transpose(1, 2)),
    "conv2d_nchw_fchw": lambda ins, attrs: _conv2d(ins[0], ins[1], attrs),
}
_OUT_VARIANTS = {"matmul": torch.mm, "batch_matmul": torch.bmm}


class GpuExecutable:
    """Executes one compiled graph on the current CUDA device."""

    def __init__(self, linalg_ir: str, chip: str = "sm_90", features: str = "+ptx80",
                 cuda_graphs: bool | None = None):
        self._core = core()
        self.plan, self.cache_hit = compile_plan(linalg_ir, chip, features)
        if cuda_graphs is None:
            cuda_graphs = os.environ.get("MLIRCAP_CUDA_GRAPHS", "1") != "0"
        self.use_graphs = cuda_graphs
        self.device = torch.device("cuda", torch.cuda.current_device())
        self._prepare()
        self._calls = 0
        self._graph = None

    # The plan, checked and turned into slots and launch programs once.
    def _prepare(self):
        plan = self.plan
        values = {v["id"]: v for v in plan["values"]}
        self.values = values
        self.slot = {vid: i for i, vid in enumerate(values)}
        self.inputs = sorted((v for v in values.values() if v["kind"] == "input"), key=lambda v: v["index"])
        self.buffers = [v for v in values.values() if v["kind"] == "buffer"]
        self.views = [v for v in values.values() if v["kind"] == "view"]
        self.constants = {}
        for v in values.values():
            if v["kind"] == "constant":
                dt = DTYPES[v["dtype"]]
                data = torch.tensor(v["data"], dtype=torch.float64 if dt.is_floating_point else torch.int64)
                t = data.expand(v["shape"]) if v.get("splat") else data.reshape(v["shape"])
                self.constants[v["id"]] = t.to(dtype=dt, device=self.device).contiguous()
        module = self._core.cuda_load_module(plan["ptx"]) if any(
            s["kind"] == "kernel" for s in plan["steps"]) else None
        self.kernels = []          # LaunchProgram
        self.program = self._core.LaunchProgram()
        self.segments = []          # ("kernels", begin, end) | ("library", step)
        functions = {}
        for step in plan["steps"]:
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
            elif step["kind"] == "library":
                if step["op"] not in LIBRARY:
                    raise PlanError(f"library op {step['op']!r} has no runtime implementation")
                self.segments.append(("library", step))
            else:
                raise PlanError(f"unknown plan step kind {step['kind']!r}")
        self.n_kernels = len(self.program)
        self.outputs = plan["outputs"]

    def _materialize(self, inputs, buffers=None):
        """Tensors for every value id (inputs given, buffers allocated or reused)."""
        t = {}
        for v, x in zip(self.inputs, inputs):
            t[v["id"]] = x
        if buffers is None:
            buffers = {v["id"]: torch.empty(v["shape"], dtype=DTYPES[v["dtype"]], device=self.device)
                       for v in self.buffers}
        t.update(buffers)
        t.update(self.constants)
        for v in self.views:   # views may be of views: resolve in dependency order
            self._view(v, t)
        return t

    def _view(self, v, t):
        if v["id"] in t:
            return t[v["id"]]
        base_v = self.values[v["of"]]
        base = t[base_v["id"]] if base_v["id"] in t else self._view(base_v, t)
        view = base.as_strided(v["shape"], v["strides"], base.storage_offset() + v.get("offset", 0))
        t[v["id"]] = view
        return view

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
        kernel_steps = [s for s in self.plan["steps"] if s["kind"] == "kernel"]
        out = []
        for j, (kind, item) in enumerate(descr):
            ms = sorted(x[j] for x in samples)[len(samples) // 2]
            if kind == "kernel":
                st = kernel_steps[item]
                shapes = [self.values[a["value"]]["shape"] for a in st["args"] if "value" in a]
                name = f"{st['name']} [{st.get('strategy', 'kernel')}] grid={st['grid'][0]} shapes={shapes[-1]}"
            else:
                name = f"library {item['op']} {[self.values[i]['shape'] for i in item['ins']]} {self.values[item['out']]['dtype']}"
            out.append((name, ms))
        return sorted(out, key=lambda x: -x[1])

    def _run_library(self, step, t):
        ins = [t[i] for i in step["ins"]]
        out = t[step["out"]]
        op = _OUT_VARIANTS.get(step["op"])
        if op is not None and out.is_contiguous():
            op(*ins, out=out)
        else:
            out.copy_(LIBRARY[step["op"]](ins, step.get("attrs", {})))

    def _prepare_inputs(self, args):
        ins = []
        for v, x in zip(self.inputs, args):
            if x.device != self.device or x.dtype != DTYPES[v["dtype"]]:
                raise PlanError(f"input {v['index']}: expected {v['dtype']} on {self.device}, got {x.dtype} on {x.device}")
            ins.append(x if x.is_contiguous() else x.contiguous())
        return ins

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
