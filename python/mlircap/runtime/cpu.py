"""CPU executor: the core library JIT-compiles the whole graph function.

The lowered function takes its results as trailing out-parameters
(buffer-results-to-out-params), so outputs are allocated here by torch and
written in place by the compiled code: inputs are passed by pointer without
copies (non-contiguous inputs are made contiguous first).
"""
from __future__ import annotations

import torch

from .._core import core


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


class CpuExecutable:
    def __init__(self, linalg_ir: str, func_name: str, outputs: list[tuple[tuple[int, ...], torch.dtype]],
                 opt_level: int = 3):
        self._core = core()
        self.engine = self._core.cpu_compile(linalg_ir, opt_level)
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


class CpuPlanExecutable:
    """Runs a CPU launch plan: fused kernels JIT-compiled by the core, library
    ops (matmul, conv) through torch (MKL/oneDNN), buffers from torch."""

    def __init__(self, linalg_ir: str, opt_level: int = 3):
        import json

        from .plan import PlanExecutor

        self._core = core()
        self.engine, plan_text = self._core.cpu_plan_compile(linalg_ir, opt_level)
        self.exe = PlanExecutor(json.loads(plan_text), torch.device("cpu"))
        self.plan = self.exe.plan
        self.n_kernels, self.n_library = self.exe.n_kernels, self.exe.n_library
        fns = {}
        self.steps = []
        for step in self.plan["steps"]:
            if step["kind"] == "kernel":
                if step["name"] not in fns:
                    fns[step["name"]] = self.engine.lookup(step["name"])
                args = []
                for a in step["args"]:
                    if "value" not in a:
                        raise RuntimeError(f"CPU kernel {step['name']}: scalar arguments are not supported")
                    shape = tuple(self.exe.values[a["value"]]["shape"])
                    args.append((a["value"], shape, contiguous_strides(shape)))
                self.steps.append(("kernel", fns[step["name"]], args))
            else:
                self.steps.append(("library", step, None))

    def __call__(self, *args) -> list[torch.Tensor]:
        exe = self.exe
        t = exe._materialize(exe._prepare_inputs(args))
        call = self._core.call_packed
        sync_threads(self._core)
        for kind, what, kargs in self.steps:
            if kind == "kernel":
                call(what, [(t[v].data_ptr(), shape, strides) for v, shape, strides in kargs])
            else:
                exe._run_library(what, t)
        return exe._outputs(t)
