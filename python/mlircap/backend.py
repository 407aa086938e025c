"""The mlircap backend: an FX graph in, a callable that runs compiled code out.

`backend(gm, example_inputs)` follows the torch.compile backend contract. It
runs aot_autograd (functionalization, decomposition to the aten ops torch-mlir
imports, parameters lifted to graph inputs) and hands each forward graph to
`compile_graph`. Backward graphs run eagerly.

Failure policy: any stage that rejects a graph makes that graph run eagerly,
with one warning naming the stage and every unsupported op; with
``strict=True`` the same report is raised as `MlircapCompileError`.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import math
import operator
import threading
import warnings
import weakref
from dataclasses import dataclass, field

import torch

from . import config, layouts, logs, unsigned_bits
from .frontend import FrontendError, decomposition_table, eager_kernels_for_islands, import_fx
from .fxutil import leaves, op_name


class MlircapCompileError(RuntimeError):
    """A graph mlircap could not compile (strict mode). Capture fronts let it
    propagate to the user instead of falling back."""

    propagate = True


@dataclass
class Options:
    strict: bool = False
    device: str = "auto"          # "auto" | "cpu" | "cuda": where compiled code runs
    opt_level: int = 3
    chip: str = config.DEFAULT_CHIP
    # CPU: run fused kernels from a launch plan with matmul/conv through torch
    # (True), or JIT the whole graph as one function of loops (False).
    cpu_plan: bool = True


@dataclass
class CompiledGraph:
    """One captured graph and every IR stage mlircap produced for it."""

    name: str
    gm: torch.fx.GraphModule
    torch_ir: str = ""
    linalg_ir: str = ""
    device: str = "cpu"
    times: dict = field(default_factory=dict)
    fallback_reason: str | None = None
    notes: list = field(default_factory=list)
    strict: bool = False
    executable: object = None
    _stage_cache: dict = field(default_factory=dict)
    _recorded: int = 0
    # uint8 computed as int32 (widen.py): which inputs to convert, which outputs to convert back
    _widened: tuple | None = None
    # uint16/32/64 held as the signed dtype of their width (unsigned_bits.py): the dtype
    # each input is viewed as, the unsigned dtype each output is viewed back as
    _held: tuple | None = None
    # inputs compiled in their memory order (layouts.py): (input index, permutation), ...
    _permuted: tuple = ()
    # outputs that are views of another output in eager, remade as such (_output_views),
    # and overlapping views of an intermediate not returned, rebuilt over one buffer
    _views: tuple = ()
    _shared: tuple = ()

    STAGES = ("fx", "torch", "linalg", "fused", "llvm", "ptx")

    def ir(self, stage: str = "linalg") -> str:
        """IR of one stage: fx, torch, linalg, fused, llvm (CPU lowering), ptx."""
        from . import worker

        if stage == "fx":
            return self.gm.code
        if stage == "torch":
            return self.torch_ir
        if stage == "linalg":
            return self.linalg_ir
        if stage not in self.STAGES:
            raise ValueError(f"unknown stage {stage!r}; one of {', '.join(self.STAGES)}")
        if not self.linalg_ir:
            raise RuntimeError(f"graph {self.name} has no linalg IR ({self.fallback_reason})")
        if stage not in self._stage_cache:
            # these pipelines are native code run on the whole graph: in the compile
            # worker when it is on, so that a crash in one is an error, not the process
            if worker.enabled():
                text = worker.stage_in_worker(self.linalg_ir, stage, config.DEFAULT_CHIP)
            else:
                text = worker.stage_text(self.linalg_ir, stage, config.DEFAULT_CHIP)
            self._stage_cache[stage] = text
        return self._stage_cache[stage]

    def __call__(self, *args):
        # Weak references to the inputs (parameters first, then user inputs) of an
        # early call, so tools like bench/gpu.py can profile the graph without
        # holding memory. Only the first calls pay for them (200+ weakrefs per
        # call showed up in BERT's per-call host time).
        if self._recorded < 2:
            self._recorded += 1
            self._last_inputs = [weakref.ref(a) if isinstance(a, torch.Tensor) else (lambda a=a: a) for a in args]
        exe = self.executable
        if exe is self.gm:   # (forward: see PartitionedGraph's steps)
            return self.gm.forward(*args)
        try:
            ins = args if not self._permuted else layouts.take_physical(args, self._permuted)
            ins = ins if self._widened is None else _widen_inputs(ins, self._widened[0])
            ins = ins if self._held is None else unsigned_bits.view_inputs(ins, self._held[0])
            if not _grad_enabled():   # aot_autograd already runs forwards under no_grad
                res = exe(*ins)
            else:   # autograd, if any, is aot_autograd's job outside this graph: torch.no_grad()
                _set_grad_enabled(False)
                try:
                    res = exe(*ins)
                finally:
                    _set_grad_enabled(True)
            if self._widened is not None:
                res = _narrow_outputs(res, self._widened[1])
            if self._held is not None:
                res = unsigned_bits.view_outputs(res, self._held[1])
            if self._views:
                res = _as_views(res, self._views)
            return res if not self._shared else _share_memory(res, self._shared)
        except Exception as e:  # noqa: BLE001
            # Compiled code only writes buffers it allocated (aot_autograd keeps
            # input mutations outside the graph), so rerunning the graph eagerly
            # leaves program state exactly as eager execution would.
            report = f"{type(e).__name__} while running compiled code: {str(e).strip()[:500]}"
            if self.strict:
                raise MlircapCompileError(f"{self.name}: {report}") from e
            logs.warn(f"mlircap: {self.name} failed at run time and now runs eagerly. {report}", stacklevel=2)
            self.fallback_reason = report
            self.executable = self.gm
            return self.gm(*args)

    def last_inputs(self):
        """The inputs of an early compiled call, if they are still alive, else None."""
        vals = [r() for r in getattr(self, "_last_inputs", [])]
        return None if any(v is None for v in vals) or not vals else vals


_grad_enabled, _set_grad_enabled = torch.is_grad_enabled, torch._C._set_grad_enabled


def _widen_inputs(args, widened: list[bool]) -> list:
    """uint8 inputs of a graph compiled with uint8 as int32 (widen.py), converted."""
    return [a.to(torch.int32) if w else a for a, w in zip(args, widened)]


def _narrow_outputs(res, widened: list[bool]):
    """Its outputs that are uint8 in the graph, converted back from int32."""
    single = not isinstance(res, (list, tuple))
    res = [r.to(torch.uint8) if w else r for r, w in zip([res] if single else res, widened)]
    return res[0] if single else res


def _outputs(gm: torch.fx.GraphModule):
    """(output node or constant, its example value or None), in output order."""
    out = gm.graph.output_node().args[0]
    for n in (out if isinstance(out, (list, tuple)) else [out]):
        yield n, (n.meta.get("val") if isinstance(n, torch.fx.Node) else None)


def _eager_roots(gm: torch.fx.GraphModule) -> list:
    """Per graph output, what it shares memory with in eager: ("input", k) for the
    k-th placeholder, ("node", name) for an intermediate, through view ops (outputs
    with one root alias each other; different roots never do)."""
    import operator

    index = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}

    def source(n):
        """The tensor `n` is a view of: through view ops, and through getitem of a
        multi-output view op (q, k, v = qkv.split(...): one root, as in eager)."""
        if not (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.args
                and isinstance(n.args[0], torch.fx.Node)):
            return None
        if getattr(n.target, "is_view", False):
            return n.args[0]
        if n.target is operator.getitem:
            multi = n.args[0]
            if multi.op == "call_function" and getattr(multi.target, "is_view", False):
                return multi
        return None

    roots = []
    for n, _ in _outputs(gm):
        while (s := source(n)) is not None:
            n = s
        if not isinstance(n, torch.fx.Node):
            roots.append(None)
        elif n in index:
            roots.append(("input", index[n]))
        else:
            roots.append(("node", n.name))
    return roots


def _output_views(gm: torch.fx.GraphModule) -> tuple:
    """(j, k, size, stride, offset, k's stride) for each output j that in eager is a view
    of the memory of output k: k the intermediate j is a view of, returned itself (y,
    y.t(); y and a.t() of a, b = y.split(2)), or else a contiguous view of all of it (y
    never returned, y.view(-1) and a of a, b = y.split(2)). The plan may compute j into a
    buffer of its own (a transpose is a kernel), so an in-place write to one output would
    not show in the other as it does in eager. _as_views remakes j as a view of k with
    eager's size, stride and storage offset relative to k's, wherever k comes back laid out
    as eager's. Offsets are relative to the intermediate's storage offset."""
    roots = _eager_roots(gm)
    outs = list(_outputs(gm))
    nodes = {n.name: n for n in gm.graph.nodes}
    anchor = {}   # root node name -> the output position j's are remade from
    for whole in (True, False):
        for k, ((n, val), root) in enumerate(zip(outs, roots)):
            if root is None or root[0] != "node" or root[1] in anchor or not isinstance(val, torch.Tensor):
                continue
            rval = nodes[root[1]].meta.get("val")
            if whole and n is nodes[root[1]]:
                anchor[root[1]] = k
            elif not whole and isinstance(rval, torch.Tensor) and val.dtype == rval.dtype and \
                    val.layout == torch.strided and val.is_contiguous() and rval.is_contiguous() and \
                    val.numel() == rval.numel() and val.storage_offset() == rval.storage_offset():
                anchor[root[1]] = k
    views = []
    for j, ((n, val), root) in enumerate(zip(outs, roots)):
        if root is None or root[0] != "node" or root[1] not in anchor:
            continue
        k = anchor[root[1]]
        kn, kval = outs[k]
        if n is kn or not isinstance(val, torch.Tensor) or val.dtype != kval.dtype or \
                val.layout != torch.strided or kval.layout != torch.strided or val.is_complex():
            continue
        views.append((j, k, tuple(int(s) for s in val.shape), tuple(int(s) for s in val.stride()),
                      int(val.storage_offset()) - int(kval.storage_offset()),
                      tuple(int(s) for s in kval.stride())))
    return tuple(views), _overlapping_views(outs, roots, nodes, set(anchor))


def _user_visible_views(views: tuple, n_user: int | None) -> tuple:
    """`views` (_output_views) less those between two outputs an aot_autograd forward only
    saves for its backward (past its `n_user` user outputs): the backward reads them by
    value and nothing else sees them, so their sharing memory as in eager is unobservable,
    while remaking one as a view cost an as_strided per call and its detach when saved
    (a ReLU's output and aot_autograd's alias of it, saved for threshold_backward: every
    ReLU of a training forward)."""
    if n_user is None:
        return views
    return tuple(v for v in views if v[0] < n_user or v[1] < n_user)


def _overlapping_views(outs, roots, nodes, anchored: set, limit: int = 1 << 24) -> tuple:
    """(root's size, root's stride, ((j, size, stride, offset), ...)) per intermediate
    the graph does not return (nor sees whole through a contiguous output) whose views
    among the outputs overlap in memory in eager (y[0] and y.diagonal(); y.T beside a of
    a, b = y.split(2)): a write to one shows in another. Disjoint views (q, k, v of a
    split) are left as the plan returns them: no write to one reaches another.
    Offsets are relative to the intermediate's storage offset."""
    members: dict[str, list] = {}
    for j, ((n, val), root) in enumerate(zip(outs, roots)):
        if root is None or root[0] != "node" or root[1] in anchored or not isinstance(val, torch.Tensor):
            continue
        members.setdefault(root[1], []).append((j, val))
    groups = []
    for name, ms in members.items():
        rval = nodes[name].meta.get("val")
        if len(ms) < 2 or not isinstance(rval, torch.Tensor) or rval.layout != torch.strided or rval.numel() == 0:
            continue
        if any(v.dtype != rval.dtype or v.layout != torch.strided or v.is_complex() for _, v in ms):
            continue
        shape, stride = tuple(int(x) for x in rval.shape), tuple(int(x) for x in rval.stride())
        extent = 1 + sum((a - 1) * b for a, b in zip(shape, stride))
        if extent > limit:
            continue
        spec = tuple((j, tuple(int(x) for x in v.shape), tuple(int(x) for x in v.stride()),
                      int(v.storage_offset()) - int(rval.storage_offset())) for j, v in ms)
        count = torch.zeros(extent, dtype=torch.int32)
        try:
            for _, size, st, off in spec:
                mark = torch.zeros(extent, dtype=torch.int32)
                mark.as_strided(size, st, off).fill_(1)
                if int(mark.sum()) != math.prod(size):
                    raise RuntimeError("overlaps itself")   # an expand: no copy_ can write it
                count += mark
        except RuntimeError:   # or a view past the intermediate's memory (as_strided): leave it
            continue
        if int(count.max()) > 1:
            groups.append((shape, stride, spec))
    return tuple(groups)


def _share_memory(res, groups: tuple):
    """The outputs with each group of _overlapping_views rebuilt as views of one new
    buffer laid out as eager's intermediate, unless the plan returned them so."""
    res = list(res)
    for shape, stride, spec in groups:
        j0, _, _, off0 = spec[0]
        ptr, start = res[j0].untyped_storage().data_ptr(), res[j0].storage_offset() - off0
        if all(res[j].untyped_storage().data_ptr() == ptr and res[j].stride() == st and
               res[j].storage_offset() - start == off for j, _, st, off in spec):
            continue
        root = res[j0].new_empty_strided(shape, stride)
        for j, size, st, off in spec:
            view = root.as_strided(size, st, off)
            view.copy_(res[j])
            res[j] = view
    return res


def _as_views(res, views: tuple):
    """The outputs with each of `views` (_output_views) remade as a view of its root output."""
    res = list(res)
    for j, k, size, stride, offset, kstride in views:
        base = res[k]
        if base.stride() == kstride and base.dtype == res[j].dtype:
            res[j] = base.as_strided(size, stride, base.storage_offset() + offset)
    return res


def _output_layouts(gm: torch.fx.GraphModule, n_out: int | None = None) -> tuple:
    """(j, shape, stride) of each output j that eager lays out not contiguous but without
    overlap (the graph's own intermediate, no view of an input or of another output's
    memory): a permutation, or padded strides (new_empty_strided((2,), (4,)) then written).
    Compiled parts return such outputs contiguous, and eager's layout is observable later (a
    randn_like of a permuted tensor after a graph break draws in its memory order:
    bench/fuzz_graphs.py seed 1510; strides, is_contiguous; an as_strided of the result
    reads its padding positions). torch.compile keeps them too. An output of no elements is
    one too, whatever its strides, also a view of an intermediate nothing else returns: every
    such layout counts as contiguous, and a compiled one came back with strides of 0
    (`x.reshape(0, 5) * 2`: (0, 0), eager's (5, 1); `torch.zeros(0, 3).t()`)."""
    roots = _eager_roots(gm)
    shared = {r for r in roots if r is not None}
    shared = {r for r in shared if sum(x == r for x in roots) > 1}
    res = []
    for j, ((n, val), root) in enumerate(zip(_outputs(gm), roots)):
        if n_out is not None and j >= n_out:
            break
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided or root in shared:
            continue
        if val.numel() != 0 and (root != ("node", getattr(n, "name", None)) or val.is_contiguous()):
            continue
        if val.numel() == 0 and (root is None or root[0] != "node"):   # (a view of an input: its own view)
            continue
        try:
            shape, stride = tuple(int(x) for x in val.shape), tuple(int(x) for x in val.stride())
        except (TypeError, RuntimeError):   # symbolic sizes
            continue
        if 0 in shape or (layouts.non_overlapping(shape, stride) and all(st >= 0 for st in stride)):
            res.append((j, shape, stride))
    return tuple(res)


def _as_eager_layouts(outs, layouts: tuple):
    """The outputs of _output_layouts copied into eager's strides where they differ."""
    outs = list(outs)
    for j, shape, stride in layouts:
        t = outs[j]
        if isinstance(t, torch.Tensor) and tuple(t.shape) == shape and t.stride() != stride:
            outs[j] = t.new_empty_strided(shape, stride).copy_(t)
    return outs


def _output_specs(gm: torch.fx.GraphModule):
    specs = []
    for n, val in _outputs(gm):
        if not isinstance(val, torch.Tensor):
            raise MlircapCompileError(f"graph output {n!r} is not a tensor")
        specs.append((tuple(int(s) for s in val.shape), val.dtype))
    return specs


def _check_static(gm: torch.fx.GraphModule):
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if n.op == "placeholder" and isinstance(val, torch.Tensor):
            # (said plainly: a sparse input reached the plan builder as "unsupported op
            # 'tensor.cast'", a meta one as "graph output add is on meta")
            if val.layout != torch.strided:
                raise MlircapCompileError(f"input {n.name} is a {str(val.layout).replace('torch.', '')} tensor: "
                                          f"mlircap compiles strided (dense) tensors only")
            if val.device.type == "meta":
                raise MlircapCompileError(f"input {n.name} is on the meta device (shapes without data): "
                                          f"nothing to compile")
        if isinstance(val, torch.SymInt) or (
            isinstance(val, torch.Tensor) and any(not isinstance(s, int) for s in val.shape)
        ):
            raise MlircapCompileError(f"dynamic shape at node {n.name}: mlircap compiles static shapes only")


def _device_of(example_inputs, gm: torch.fx.GraphModule | None = None) -> str:
    """Where the graph runs: cuda if an input, or else a value the graph makes
    (`torch.zeros(3, device="cuda")` has no input), lives on a GPU."""
    from .target import current

    if current() is not None:   # the compile's named target (target.py)
        return current()
    for t in example_inputs:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            return "cuda"
    if gm is not None and any(v.device.type == "cuda" for v in _graph_tensors(gm)):
        return "cuda"
    return "cpu"


def _graph_tensors(gm: torch.fx.GraphModule):
    for n in gm.graph.nodes:
        yield from leaves(n.meta.get("val"), torch.Tensor)


def _check_devices(gm: torch.fx.GraphModule, device: str) -> None:
    """Compiled code makes every output on `device`: a graph whose outputs live
    elsewhere (a CPU tensor made beside GPU ones) runs eagerly."""
    for n, v in _outputs(gm):
        if isinstance(v, torch.Tensor) and v.device.type != device:
            raise MlircapCompileError(f"graph output {n.name} is on {v.device}, the graph is compiled for {device}")


_counter = 0


def _next_id() -> int:
    global _counter
    _counter += 1
    return _counter


def compile_graph(gm: torch.fx.GraphModule, example_inputs, options: Options, registry: list | None = None,
                  raise_unsupported: bool = False):
    """Compiles one aten-level graph; returns a callable (eager on fallback).
    `raise_unsupported`: ops torch-mlir rejects raise `_Unsupported` (the
    caller runs them eagerly and recompiles the rest) instead of a fallback."""
    graph = CompiledGraph(name=f"graph{_next_id()}", gm=gm, strict=options.strict)
    device = options.device if options.device != "auto" else _device_of(example_inputs, gm)
    graph.device = device
    # aot_autograd calls compilers under its FakeTensorMode: every tensor made
    # here (plan constants, scratch buffers) must be real, or it reaches the
    # user as a FakeTensor with no data (and its data_ptr() is garbage).
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        from .opmath import compute_in_float32, gpu_computes_in_float32
        from .widen import widen_uint8

        # bf16/f16 ops round once, as eager's do (opmath.py); the fallback
        # (graph.gm) stays the captured graph
        # (GPU: ops lowered in more than one rounding step, and ops with a Python number past
        # the low dtype's range, read in float32 as eager's CUDA kernels read it:
        # opmath.gpu_computes_in_float32)
        target = (compute_in_float32(gm) if device == "cpu" else
                  compute_in_float32(gm, only=gpu_computes_in_float32, rounded_numbers=False)) or gm
        from .intmath import narrow_int_conversions   # float -> int8 / int16 through int32, as

        narrow_int_conversions(target)   # eager converts (in place: the fallback means the same)
        physical = layouts.physical_inputs(target) if layouts.enabled(device) else None
        if physical is not None:
            target = physical[0]
        held = unsigned_bits.hold_signed(target)
        if held is not None:   # uint64 / uint32 / uint16: the same bits as a signed dtype
            target = held[0]
        widened = widen_uint8(target)
        if widened is None:
            result = _compile_graph(graph, target, device, options, raise_unsupported, fallback=gm)
        else:   # compile the int32 form; the fallback (graph.gm) stays the uint8 graph
            result = _compile_graph(graph, widened[0], device, options, raise_unsupported, fallback=gm)
            if graph.executable is not gm:
                graph._widened = widened[1:]
        if physical is not None and graph.executable is not gm:
            graph._permuted = physical[1]
        if held is not None and graph.executable is not gm:
            graph._held = held[1:]
    if registry is not None:
        registry.append(graph)
    return result


def _compile_graph(graph: CompiledGraph, gm: torch.fx.GraphModule, device: str, options: Options,
                   raise_unsupported: bool, fallback: torch.fx.GraphModule | None = None):
    fallback = gm if fallback is None else fallback
    try:
        _check_static(gm)
        if options.device == "auto":
            _check_devices(gm, device)
        outputs = _output_specs(gm)
        with logs.stage(f"{graph.name}: torch-mlir FX import", graph.times):
            raw_ir = import_fx(gm, func_name="main")
        with logs.stage(f"{graph.name}: torch-mlir lowering + codegen check", graph.times):
            fe = _lower(raw_ir, device, options)
        graph.torch_ir, graph.linalg_ir = fe["torch_ir"], fe["linalg_ir"]
        if fe["cpu_plan_error"]:
            raise _PlanRejected("CPU", fe["cpu_plan_error"])
        if device == "cuda":
            from .runtime.cuda import GpuExecutable

            with logs.stage(f"{graph.name}: GPU codegen (or plan cache) + load", graph.times):
                graph.executable = GpuExecutable(graph.linalg_ir, options.chip)
            if "plan_cache_hit" in fe:   # the worker compiled (or found) the plan this one loaded
                graph.executable.cache_hit = fe["plan_cache_hit"]
        else:
            from .runtime.cpu import CpuExecutable, CpuPlanExecutable

            with logs.stage(f"{graph.name}: CPU codegen + JIT", graph.times):
                if options.cpu_plan:
                    graph.executable = CpuPlanExecutable(graph.linalg_ir, options.opt_level)
                else:   # the whole graph as one function of loops (debugging; slow)
                    graph.executable = CpuExecutable(graph.linalg_ir, "main", outputs, options.opt_level)
        if hasattr(graph.executable, "copy_aliased_outputs"):
            graph.executable.copy_aliased_outputs(_eager_roots(gm))
        # which outputs are views of which in eager: read from the captured graph, not from
        # the form compiled (widen.py wraps every uint8 op, an expand too, in a `& 255`, so
        # there no output is a view of another)
        graph._views, graph._shared = _output_views(fallback)
        graph._views = _user_visible_views(graph._views, gm.meta.get("mlircap_num_fwd_outputs"))
        logs.log("progress", f"{graph.name}: compiled for {device}")
        _dump(graph)
        return graph
    except Exception as e:  # noqa: BLE001 - every failure becomes a fallback or a strict error
        if not isinstance(e, _PlanRejected) and _PLAN_REJECTED in str(e):
            e = _PlanRejected(device.upper(), str(e))
        unsupported = {}
        if raise_unsupported and not options.strict:
            unsupported = _unsupported_nodes(gm, e)
            if not unsupported and (isinstance(e, _PlanRejected) or _lowering_failed(e)
                                    or _codegen_failed(e, device)
                                    or _lowering_crashed(e) and _toolchain_works(device, options)):
                # the failure names no node of the graph: find the ops that fail alone
                # (torch-mlir may fail on a pointwise op too: fmod.Scalar of a float;
                # so may the GPU codegen: integer abs before convert-math-to-llvm; torch-mlir
                # crashed on int8 arange)
                unsupported = _probe_rejected(gm, device, options,
                                              pointwise=_lowering_failed(e) or _codegen_failed(e, device)
                                              or _lowering_crashed(e))
        if unsupported:
            raise _Unsupported(unsupported, graph) from e
        report = _failure_report(graph, e)
        graph.fallback_reason = report
        crash_ir = getattr(e, "ir", None)   # worker.WorkerCrashed
        if crash_ir and not graph.linalg_ir:   # the worker died in codegen: keep its input for the dump
            graph.torch_ir, graph.linalg_ir = crash_ir["torch_ir"], crash_ir["linalg_ir"]
        if options.strict:
            raise MlircapCompileError(report) from e
        logs.warn(f"mlircap: running {graph.name} eagerly. {report}", stacklevel=2)
        graph.executable = fallback
        _dump(graph)
        return graph


class _Unsupported(Exception):
    """torch-mlir rejected these graph nodes (node name -> 'op at file:line')."""

    def __init__(self, nodes: dict[str, str], graph: CompiledGraph):
        self.nodes, self.graph = nodes, graph
        super().__init__(", ".join(nodes.values()))


_PLAN_REJECTED = "mlircap: unsupported op"
_PIPELINE_FAILED = "pass pipeline failed"   # the core's error when a pass of its pipeline fails


def _pipeline_failed(detail: str) -> bool:
    """The core's error `detail` is a failing pass's, not the plan builder's rejection of an
    op it has no kernel for (which fails the pipeline too)."""
    return _PIPELINE_FAILED in detail and _PLAN_REJECTED not in detail


class _PlanRejected(RuntimeError):
    """The core's plan builder has no kernel or library call for an op."""

    def __init__(self, target: str, detail: str):
        lines = detail.strip().splitlines() or [""]
        first = next((ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln), lines[-1])
        # a pass of the CPU pipeline failed, not the plan builder: any op may be the cause
        self.pipeline_failed = _pipeline_failed(detail)
        super().__init__(f"the {target} launch-plan builder rejected the graph: {first}")


# What the compile worker returned for a request (its IR text, options): compile_partitioned's
# attempts compile the parts that new islands left unchanged again (a MoE model: 5 of 38
# requests, 3.4 of 18 s)
_LOWERED: collections.OrderedDict[bytes, dict] = collections.OrderedDict()


def _lower(raw_ir: str, device: str, options: Options, check: bool = False) -> dict:
    """torch-mlir's lowering and a codegen check, in the compile worker (a
    crash there becomes a fallback) or, with MLIRCAP_COMPILE_WORKER=0, here
    (where the executable's own compile is the check, unless `check`)."""
    from . import worker

    req = {"raw_ir": raw_ir, "device": device, "chip": options.chip, "features": config.DEFAULT_PTX_FEATURES,
           "opt_level": options.opt_level, "env": worker.settings()}
    if not options.cpu_plan and device == "cpu":
        req["device"] = "none"
    if not worker.enabled():
        return worker._compile(req if check else {**req, "device": "none"}, lambda stage, ir=None: logs.log("progress", stage))
    # (fault injection, MLIRCAP_WORKER_FAULT, is part of the request)
    key = hashlib.sha256(repr((sorted(req.items()), config.env("MLIRCAP_WORKER_FAULT"))).encode()).digest()
    if key in _LOWERED:   # the same part again: a later attempt of compile_partitioned, a probe
        _LOWERED.move_to_end(key)
        return dict(_LOWERED[key])
    try:
        out = worker.compile_in_worker(**req)
        _LOWERED[key] = dict(out)
        if len(_LOWERED) > 64:
            _LOWERED.popitem(last=False)
        return out
    except worker.WorkerError as e:
        info = e.info
        if info.get("frontend"):
            raise FrontendError(info["stage"], info["message"], [tuple(u) for u in info["unsupported"]]) from None
        if _PLAN_REJECTED in info["message"]:
            raise _PlanRejected(device.upper(), info["message"]) from None
        raise RuntimeError(f"{info['type']}: {info['message']}") from None


# (device, op, argument signature) -> why the op does not compile alone (no kernel for it,
# torch-mlir cannot lower it), or None
_PROBES: dict[tuple, str | None] = {}
# (device, op, dtypes and ranks of its tensor arguments) of ops that compiled alone under
# some signature: probed again only when a first pass over the other ops finds nothing
_ACCEPTED_KINDS: set[tuple] = set()
# Ops that only make views, fill or allocate: they compile wherever the graph does, so a
# probe's first pass leaves them out (a MoE layer's graph spent 66 of its 90 probes, each a
# torch-mlir lowering in the compile worker, on them)
_SHAPE_OPS = frozenset(f"aten::{n}" for n in (
    "view", "_unsafe_view", "reshape", "slice", "select", "permute", "transpose", "t", "expand",
    "unsqueeze", "squeeze", "alias", "full", "arange", "scalar_tensor", "empty", "empty_like",
    "empty_strided", "zeros", "ones", "zeros_like", "ones_like", "full_like", "lift_fresh_copy",
    "detach", "split", "split_with_sizes", "unbind", "clone"))


def _kind(device: str, n: torch.fx.Node) -> tuple:
    vals = [a.meta.get("val") for a in n.all_input_nodes]
    return (device, op_name(n.target)) + tuple((str(v.dtype), v.dim()) for v in vals if isinstance(v, torch.Tensor))


def _signature(x):
    if isinstance(x, torch.fx.Node):
        v = x.meta.get("val")
        return ("T", tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else ("N", x.name)
    if isinstance(x, (list, tuple)):
        return tuple(_signature(a) for a in x)
    if isinstance(x, dict):
        return tuple((k, _signature(v)) for k, v in sorted(x.items()))
    return repr(x)


def _probe_rejected(gm: torch.fx.GraphModule, device: str, options: Options, limit: int = 32,
                    pointwise: bool = False) -> dict[str, str]:
    """The plan builder (or torch-mlir's lowering, naming no op) rejected `gm`:
    compile its non-pointwise ops (`pointwise`: then its pointwise ones) one at a time
    to find those it has no kernel for or torch-mlir cannot lower (they become eager
    islands).
    Results are cached per op and argument signature; at most `limit` new
    probes per graph."""
    import operator

    from .partition import Part, extract

    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    is_pointwise = [torch.Tag.pointwise in getattr(n.target, "tags", ()) for n in nodes]
    # the non-pointwise ops first: pointwise ones (only for `pointwise`) get what is
    # left of the budget, and only when no other op failed
    order = [n for n, pw in zip(nodes, is_pointwise) if not pw] + [None] + \
        ([n for n, pw in zip(nodes, is_pointwise) if pw] if pointwise else [])
    # A first pass leaves out the ops that make views and the kinds of op that compiled
    # alone before (probed in the second pass only when the first finds nothing): the
    # attempts in compile_partitioned retry with the ops found as islands, and go on
    # while they find new ones, so what a first pass misses is found then
    def first(n) -> bool:
        return op_name(n.target) not in _SHAPE_OPS and _kind(device, n) not in _ACCEPTED_KINDS
    passes = [[n for n in order if n is None or first(n)], [n for n in order if n is None or not first(n)]]
    found, probes = {}, 0
    no_kernel, failed = f"no {device.upper()} kernel", f"{'GPU' if device == 'cuda' else 'CPU'} codegen failed"
    for n in passes[0] + [None] + passes[1]:
        if n is None:
            if found:
                break
            continue
        key = (device, op_name(n.target), _signature(n.args), _signature(n.kwargs))
        if key not in _PROBES:
            if probes >= limit:
                break
            probes += 1
            getitems = [u for u in n.users if u.target is operator.getitem]
            sub, _, outs = extract(gm, Part(eager=False, stage=0, nodes=[n] + getitems), set(getitems) or {n})
            rejected = None   # why the op cannot compile alone, or None
            if outs:
                try:
                    fe = _lower(import_fx(sub), device, options, check=True)
                    err = fe["cpu_plan_error"]
                    rejected = None if not err else failed if _pipeline_failed(err) else no_kernel
                except _PlanRejected as pr:
                    rejected = failed if pr.pipeline_failed else no_kernel
                except FrontendError as fe_err:   # torch-mlir cannot lower the op alone either
                    rejected = "torch-mlir cannot lower it" if _lowering_failed(fe_err) else None
                except Exception as other:  # noqa: BLE001 - another failure is not this op's plan
                    rejected = failed if _codegen_failed(other, device) else \
                        "torch-mlir crashed on it" if _lowering_crashed(other) else None
            _PROBES[key] = rejected
            if rejected is None:
                _ACCEPTED_KINDS.add(_kind(device, n))
            logs.log("fallback", f"probe {key[1]}: {rejected or 'accepted'}")
        if _PROBES[key]:
            found[n.name] = f"{op_name(n.target).replace('::', '.')} at {_node_loc(n)} ({_PROBES[key]})"
    if found and not _toolchain_works(device, options):
        # x + 1 does not compile either (a bad chip, a broken toolchain): the failure
        # is not these ops', and an island per op would run far slower than the
        # captured graph falling back whole
        logs.log("fallback", "x + 1 does not compile either: the whole graph falls back")
        return {}
    return found


def _toolchain_works(device: str, options: Options) -> bool:
    """Whether a trivial graph (x + 1) compiles for `device` with these options
    (cached)."""
    key = ("x + 1", device, options.chip, options.opt_level)
    if key not in _PROBES:
        from torch.fx.experimental.proxy_tensor import make_fx

        try:
            _lower(import_fx(make_fx(lambda x: x + 1)(torch.zeros(4))), device, options, check=True)
            _PROBES[key] = None
        except Exception as e:  # noqa: BLE001 - any failure means the toolchain is broken
            _PROBES[key] = f"{type(e).__name__}: {e}"[:300]
        logs.log("fallback", f"toolchain check for {device}: {_PROBES[key] or 'ok'}")
    return _PROBES[key] is None


def _codegen_failed(e: Exception, device: str) -> bool:
    """mlircap's GPU or CPU pass pipeline failed on the graph (an op its codegen cannot
    lower, pointwise ones included): its ops are probed one by one, pointwise ones
    too, as for a rejected plan. (On the CPU the compile worker's failure comes as a
    _PlanRejected whose message keeps only the diagnostic.)"""
    return getattr(e, "pipeline_failed", False) or _pipeline_failed(str(e))


def _lowering_crashed(e: Exception) -> bool:
    """The compile worker died (a signal: SIGSEGV, SIGABRT) in torch-mlir's lowering: the
    graph's ops are probed one by one (each crash ends only a worker) to find the op it
    crashes on (int8 arange did), which then runs through torch, named with its line,
    instead of the whole graph running eagerly with a warning naming no op."""
    from .worker import WorkerCrashed

    return isinstance(e, WorkerCrashed) and e.how.startswith("died") and "torch-mlir lowering" in e.stage


def _lowering_failed(e: Exception) -> bool:
    """torch-mlir's torch-to-linalg lowering rejected the graph (a diagnostic that may
    name no op of the graph: 'failed to legalize torch.constant.int' after
    diagonal_scatter, a tensor.cast verifier error after adaptive_max_pool2d)."""
    return isinstance(e, FrontendError) and e.stage == "torch-to-linalg"


def _unsupported_nodes(gm: torch.fx.GraphModule, e: Exception) -> dict[str, str]:
    """The nodes of `gm` whose ops torch-mlir reported as unsupported."""
    from .partition import op_name

    if not isinstance(e, FrontendError):
        return {}
    found = {}
    if not e.unsupported:
        # The FX importer raises on the first node it cannot import and names
        # its target (e.g. a higher-order op such as with_effects).
        text = str(e)
        for n in gm.graph.nodes:
            if n.op != "call_function":
                continue
            name = op_name(n.target)
            short = name.split("::")[-1]
            # (torch-mlir's parser names the op as torch-mlir spells it: 'torch.aten.copy_')
            if f"'{short}'" in text or f"'{name}'" in text or f"target={name}" in text or \
                    f"'torch.{name.replace('::', '.')}'" in text:
                found[n.name] = f"{name.replace('::', '.')} at {_node_loc(n)}"
        return found
    for op, loc in e.unsupported:
        name = op[len("torch."):] if op.startswith("torch.") else op
        for n in gm.graph.nodes:
            if n.op == "call_function" and name in _mlir_names(n.target):
                found[n.name] = f"{name} at {loc or '<unknown location>'}"
    return found


def _mlir_names(target) -> tuple[str, ...]:
    """The names torch-mlir may give the op of `target`, without the `torch.` prefix:
    `aten.add` and, for an overload other than the default, `aten.add.Tensor` (its ops
    are named after the overload: torch.aten.pow.Tensor_Scalar, torch.aten.median.dim)."""
    from .partition import op_name

    base = op_name(target).replace("::", ".")
    overload = getattr(target, "_overloadname", "")
    return (base, f"{base}.{overload}") if overload and overload != "default" else (base,)


def compile_partitioned(gm: torch.fx.GraphModule, example_inputs, options: Options, registry: list | None = None):
    """Compiles `gm` around its eager islands (python/mlircap/partition.py):
    random ops, index ops with input-dependent indices, unsupported dtypes,
    and ops torch-mlir rejects run through torch; the rest is compiled.
    Without islands this is `compile_graph`."""
    from .attention import fuse_attention
    from .complex_pairs import lower_complex
    from .constfold import fold_constants
    from .partition import extract, fill_empty_results, partition, rewrite_random_likes
    from .softmax_steps import softmax_like_eager
    from .split_reductions import channel_stats, split_reductions

    try:
        _check_static(gm)
    except MlircapCompileError:
        # symbolic shapes (torch.compile's automatic dynamic): nothing compiles, the graph
        # runs eagerly whole (split into parts, a SymInt the backward reads had no part
        # producing it: RuntimeError 'graph output mul_6 is produced by no part' out of
        # the user's call)
        return compile_graph(gm, example_inputs, options, registry, raise_unsupported=False)
    gm = copy.copy(gm)
    gm.graph = copy.deepcopy(gm.graph)
    rewrite_random_likes(gm)
    fuse_attention(gm)
    softmax_like_eager(gm)
    fold_constants(gm)
    channel_stats(gm)
    split_reductions(gm)
    fill_empty_results(gm)
    lower_complex(gm)
    gm.recompile()
    forced: dict[str, str] = {}
    # Each attempt compiles the parts; a part with unsupported ops names them and
    # they become islands in the next attempt. Go on while attempts find new ones
    # (a graph with many kinds of unsupported ops needs several).
    calls = sum(n.op == "call_function" for n in gm.graph.nodes)
    for _attempt in range(max(4, min(64, calls))):
        parts = partition(gm, {k: "unsupported" for k in forced})
        if options.strict:
            _report_unsupported(gm, parts, forced, options)
        if len(parts) == 1 and not parts[0].eager:
            try:
                return compile_graph(gm, example_inputs, options, registry, raise_unsupported=True)
            except _Unsupported as u:
                if not _force(forced, u):
                    break
                continue
        compiled: list[CompiledGraph] = []
        steps = []
        try:
            for part in parts:
                inside = set(part.nodes)
                used_later = {n for n in part.nodes if any(u not in inside for u in n.users)}
                sub, ins, outs = extract(gm, part, used_later)
                g = compile_views(sub, options) if part.views and outs else None
                if g is not None:
                    compiled.append(g)
                    steps.append((g, ins, outs))
                    continue
                if part.eager or not outs:   # a part without outputs only has effects: run it as it is
                    steps.append((_EagerIsland(sub, part.reasons, [None if _any_layout(n, inside) else
                                                                   n.meta.get("val") for n in ins],
                                               [_unit_last_stride(n, inside) for n in ins]), ins, outs))
                    continue
                examples = [n.meta.get("val") for n in ins] + [n.meta.get("val") for n in outs]
                g = compile_graph(sub, examples, options, None, raise_unsupported=True)
                compiled.append(g)
                steps.append((g, ins, outs))
        except _Unsupported as u:
            if not _force(forced, u):
                break
            continue
        if registry is not None:
            registry.extend(compiled)
        islands = [f"{n}: {r}" for p in parts if p.eager for n, r in p.reasons.items()]
        logs.log("fallback", f"graph split into {len(parts)} parts; eager islands: {', '.join(islands)}")
        _report_unsupported(gm, parts, forced, options)
        from .partition import PartitionedGraph

        pg = PartitionedGraph(gm, steps)
        _capture_whole_on_cuda(pg, compiled, parts, example_inputs)
        return pg
    # Unsupported ops keep appearing: run the whole graph eagerly.
    graph = CompiledGraph(name=f"graph{_next_id()}", gm=gm, strict=options.strict)
    graph.executable = gm
    graph.fallback_reason = "unsupported ops: " + ", ".join(forced.values())
    if registry is not None:
        registry.append(graph)
    logs.warn(f"mlircap: running {graph.name} eagerly. {graph.fallback_reason}", stacklevel=2)
    return graph


def _force(forced: dict[str, str], u: _Unsupported) -> bool:
    """Adds the nodes `u` names to the islands; False when none is new (no progress)."""
    new = set(u.nodes) - set(forced)
    forced.update(u.nodes)
    return bool(new)


def _capture_whole_on_cuda(pg, compiled: list[CompiledGraph], parts, example_inputs) -> None:
    """On CUDA a partitioned graph runs as one CUDA graph (runtime.cuda.WholeGraph):
    its compiled parts and islands (fused attention, index ops, random ops) replay
    together. Random islands drawing from the default CUDA generator replay as eager
    draws them: a captured graph reads the generator's seed and offset at each replay
    and advances the offset as the captured draws did (torch's graph-safe philox
    state). One drawing from a generator the user passes (`generator=`) is not
    registered with the graph: such a graph runs part by part."""
    if not config.env_flag("MLIRCAP_CUDA_GRAPHS"):
        return
    for p in parts:
        for n in p.nodes if p.eager else ():
            if p.reasons.get(n.name) == "random" and n.kwargs.get("generator") is not None:
                logs.log("kernels", "partitioned graph runs part by part: an island draws random numbers "
                                    "from a generator of its own")
                return
            if any(v.device.type == "cpu" for v in leaves(n.meta.get("val"), torch.Tensor)):
                # a CUDA graph replays device work only: the island would keep its
                # capture-time result (torch.randperm(n) without a device, a CPU rand)
                logs.log("kernels", f"partitioned graph runs part by part: island {n.name} computes on the CPU")
                return
    vals = [v for v in example_inputs if isinstance(v, torch.Tensor)]
    if not vals or len(vals) != len(example_inputs) or not all(v.is_cuda for v in vals):
        kinds = sorted({type(v).__name__ if not isinstance(v, torch.Tensor) else f"{v.device.type} tensor"
                        for v in example_inputs})
        logs.log("kernels", f"partitioned graph runs part by part: its inputs are not all CUDA tensors ({kinds})")
        return
    from .runtime.cuda import GpuExecutable, WholeGraph

    exes = [g.executable for g in compiled]
    # views-only parts (_ViewProgram: as_strided, no kernel) replay inside the graph too;
    # when one blocked the capture, BERT/GPT-2 bf16 with fused attention (15 parts) ran
    # part by part: 0.25x/0.35x inductor+CUDA graphs on the H200 at 312f632
    if all(isinstance(e, (GpuExecutable, _ViewProgram)) for e in exes):
        pg.whole = WholeGraph(pg.run_parts, [e for e in exes if isinstance(e, GpuExecutable)])
    else:
        kinds = sorted({type(e).__name__ for e in exes if not isinstance(e, (GpuExecutable, _ViewProgram))})
        logs.log("kernels", f"partitioned graph runs part by part: parts of kind {kinds} cannot be captured")


def _node_loc(node: torch.fx.Node) -> str:
    """The user's file:line a graph node came from, if recorded."""
    import re

    found = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    return f"{found[-1][0]}:{found[-1][1]}" if found else "<unknown location>"


def _report_unsupported(gm: torch.fx.GraphModule, parts, forced: dict[str, str], options: Options) -> None:
    """Ops that run through torch because the compiler cannot handle them
    (not the by-design islands: random and index ops): one warning, or
    MlircapCompileError in strict mode."""
    from .partition import BY_DESIGN, op_name

    nodes = {n.name: n for n in gm.graph.nodes}
    lines = []
    for p in parts:
        for name, reason in p.reasons.items():
            if reason in BY_DESIGN:
                continue
            n = nodes[name]
            lines.append(forced.get(name) or f"{op_name(n.target).replace('::', '.')} at {_node_loc(n)} ({reason})")
    if not lines:
        return
    text = ("these ops are not supported by the compiler and run through torch inside the compiled graph:\n"
            + "\n".join(f"  {line}" for line in dict.fromkeys(lines)))
    if options.strict:
        raise MlircapCompileError(text)
    logs.warn(f"mlircap: {text}", stacklevel=3)


def compile_views(gm: torch.fx.GraphModule, options: Options) -> CompiledGraph | None:
    """A graph of views only (partition.Part.views) as a CompiledGraph whose outputs
    are `as_strided` views of its inputs, with the sizes, strides and storage offsets
    (relative to the input's) the trace gave them: what a compiler emits for views
    (inductor's reinterpret_tensor). Nothing is copied, so outputs alias the inputs
    as eager's do. None when an output is no strided view of one input in its dtype
    (view(dtype), complex views): then the views run through torch."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(phs)}
    specs = []
    for out, val in _outputs(gm):
        base = out
        while isinstance(base, torch.fx.Node) and base.op == "call_function":
            base = base.args[0] if base.args else None
        bval = base.meta.get("val") if isinstance(base, torch.fx.Node) else None
        if base not in index or not isinstance(val, torch.Tensor) or not isinstance(bval, torch.Tensor) or \
                val.dtype != bval.dtype or val.is_complex() or val.layout != torch.strided:
            return None
        specs.append((index[base], tuple(int(s) for s in val.shape), tuple(int(s) for s in val.stride()),
                      int(val.storage_offset()) - int(bval.storage_offset())))
    layouts = []
    for n in phs:
        v = n.meta.get("val")
        layouts.append((tuple(int(s) for s in v.shape), tuple(int(s) for s in v.stride()))
                       if isinstance(v, torch.Tensor) else None)
    graph = CompiledGraph(name=f"graph{_next_id()}", gm=gm, strict=options.strict)
    vals = [n.meta.get("val") for n in phs]
    graph.device = next((v.device.type for v in vals if isinstance(v, torch.Tensor)), "cpu")
    graph.executable = _ViewProgram(specs, layouts, gm)
    graph.notes.append("views of the inputs only: as_strided, nothing computed")
    logs.log("progress", f"{graph.name}: views only ({len(specs)} outputs)")
    return graph


class _ViewProgram:
    """Outputs (input index, size, stride, storage offset relative to the input's) as
    views of the inputs; inputs laid out unlike the trace's run the views through torch."""
    n_kernels = n_library = 0   # launches nothing

    def __init__(self, specs: list[tuple], layouts: list, gm: torch.fx.GraphModule):
        self.specs, self.layouts, self.gm = specs, layouts, gm

    def __call__(self, *args):
        for a, lay in zip(args, self.layouts):
            if lay is not None and (tuple(a.shape), a.stride()) != lay:
                return self.gm(*args)
        return tuple(args[i].as_strided(size, stride, args[i].storage_offset() + off)
                     for i, size, stride, off in self.specs)


class _EagerIsland:
    """Ops of a compiled graph that run through torch (see partition.py).

    Its inputs get the strides they have in eager execution: compiled parts return
    contiguous tensors where eager has views (a permute, a slice of a padded
    tensor, an expand), and torch's kernels depend on the layout: `native_dropout`
    and the other random ops fill a mask laid out like their input in memory
    order, so a contiguous input drops other elements than eager's permuted one
    under the same seed; memory-efficient attention requires the mask's strides
    aligned, which eager gets by padding the mask and slicing it back."""

    def __init__(self, gm: torch.fx.GraphModule, reasons: dict[str, str], examples: list | None = None,
                 unit: list | None = None):
        self.gm, self.reasons = gm, reasons
        self.training = any(n.target is torch.ops.aten.mkldnn_rnn_layer.default and n.args[-1] is True
                            for n in gm.graph.nodes)
        # (eager's contiguous layouts too: a compiled part may return a clone / contiguous()
        # as a view of its own buffer, where eager's is contiguous, and the island's aten.view
        # of it raised 'view size is not compatible with input tensor's size and stride':
        # transformers' GPT2DoubleHeadsModel, lm_logits[..., :-1, :].contiguous().view(-1, V)
        # beside a dropout island; _restride leaves a tensor already so laid out as it is)
        self.layouts = [_eager_layout(v, contiguous=True) for v in examples or ()]
        # inputs read only where any layout with a unit last stride gives eager's values
        # (_unit_last_stride): eager's layout only for a tensor whose last stride is not 1
        self.unit = [bool(u) and lay is not None for u, lay in zip(unit or [False] * len(self.layouts), self.layouts)]
        if not any(self.layouts):
            self.layouts = None
        else:
            kept = sum(x is not None and not u and not _contiguous_layout(x) for x, u in zip(self.layouts, self.unit))
            loose = sum(self.unit)
            logs.log("fallback", f"island {', '.join(reasons)}: {kept} of {len(self.layouts)} inputs given "
                                 f"eager's layout" + (f", {loose} any layout with a unit last stride" if loose else ""))
        self.direct = None if self.training else _single_op_call(gm)

    def __call__(self, *args):
        d = self.direct
        if d is not None and self.layouts is None:
            # (one op: torch's kernel called without the generated forward, the OpOverload's
            # Python __call__ and the getitem calls: 3 frames a call, per convolution's backward)
            op, spec, picks = d
            res = op(*[args[v] if i else v for i, v in spec])
            return tuple([res if j is None else res[j] for j in picks])
        if self.layouts is not None:
            args = [a if lay is None or (u and _unit_stride(a)) else _restride(a, lay)
                    for a, lay, u in zip(args, self.layouts, self.unit)]
        if self.training and not torch.is_grad_enabled():
            # oneDNN's LSTM layer in training (train=True) keeps the workspace its backward
            # reads only under grad mode, which a compiled forward runs without (as an
            # autograd.Function's forward): under no_grad it returns none, as eager's layer
            # never does. Grad mode on, on detached inputs: no autograd graph is built.
            with torch.enable_grad():
                return self.gm.forward(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
        return self.gm.forward(*args)   # (not the module's __call__: see PartitionedGraph's steps)


def _single_op_call(gm: torch.fx.GraphModule):
    """An island of one ATen op on its inputs (a convolution's backward, a fused attention
    kernel, a pooling backward: a library op of a backward graph) as (the op's C++ entry,
    its arguments as (True, input index) / (False, constant), the outputs as the result
    (None) or its item j); None for any other island."""
    import operator

    nodes = list(gm.graph.nodes)
    phs = {n: i for i, n in enumerate(n for n in nodes if n.op == "placeholder")}
    calls = [n for n in nodes if n.op == "call_function"]
    ops = [n for n in calls if type(n.target) is torch._ops.OpOverload]
    if len(ops) != 1 or any(n.op not in ("placeholder", "call_function", "output") for n in nodes):
        return None
    op = ops[0]
    if op.kwargs or any(n is not op and not (n.target is operator.getitem and n.args[0] is op and
                                              isinstance(n.args[1], int)) for n in calls):
        return None
    spec = []
    for a in op.args:
        if isinstance(a, torch.fx.Node):
            if a not in phs:
                return None
            spec.append((True, phs[a]))
        elif isinstance(a, dict) or (isinstance(a, (list, tuple)) and
                                     any(isinstance(x, (torch.fx.Node, list, tuple, dict)) for x in a)):
            return None
        else:
            spec.append((False, a))
    outs = nodes[-1].args[0]
    if not isinstance(outs, (list, tuple)):
        return None
    picks = []
    for o in outs:
        if o is op:
            picks.append(None)
        elif isinstance(o, torch.fx.Node) and o.target is operator.getitem and o.args[0] is op:
            picks.append(o.args[1])
        else:
            return None
    return getattr(op.target, "_op", op.target), spec, picks


# fused attention kernels that take q, k and v in any layout with a unit last stride
# (the memory-efficient kernel's alignment rules are the mask's, which keeps eager's)
_ANY_QKV_LAYOUT = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention")


def _any_layout(node: torch.fx.Node, island: set) -> bool:
    """`node`, an input of an eager island, is only read as q, k or v of fused attention
    without dropout, so the island need not give it eager's layout: restriding q, k and
    v was 3 of the 5 copy kernels per attention layer in GPT-2/BERT bf16 on the H200."""
    from .partition import is_random, op_name

    users = [u for u in node.users if u in island]
    if users and all(u.op == "call_function" and op_name(u.target) == "aten::convolution_backward" and
                     node in u.args[:3] and node not in u.args[3:] and node not in u.kwargs.values()
                     for u in users):
        # a convolution's backward reads its operands in any strides: eager's layout matters
        # where it picks the memory format (channels-last), else it only cost a copy to
        # eager's strides (a conv1d input transposed back, PointNet's) and a slower path
        return not _channels_last(node.meta.get("val"))
    return bool(users) and all(
        u.op == "call_function" and op_name(u.target) in _ANY_QKV_LAYOUT and
        not is_random(u) and node in u.args[:3] and node not in u.args[3:] and node not in u.kwargs.values()
        for u in users)


# fused attention backwards whose operands grad_out, query, key, value and out (args[:5]) may
# come in any layout with a unit last stride: the CPU flash kernel reads each with its own
# strides (leading dimensions of its GEMMs) and lays out its gradients alike whatever they
# are, with eager's values bit for bit (q / k / v as eager's permuted views of a packed
# projection or contiguous, causal or masked, float32 and bfloat16). A last stride other
# than 1 it does not check and reads wrongly, so such a tensor still gets eager's layout.
_UNIT_STRIDE_OPERANDS = {"aten::_scaled_dot_product_flash_attention_for_cpu_backward": (5, 6)}


def _unit_last_stride(node: torch.fx.Node, island: set) -> bool:
    """`node`, an input of an eager island, is only read as one of the operands of
    _UNIT_STRIDE_OPERANDS' ops (with dropout off): it need not be restrided to eager's
    layout where its last stride is 1 (a copy per operand per call, 3 to 5 per attention
    layer's backward on the CPU)."""
    from .partition import op_name

    def loose(node, u, depth=0) -> bool:
        if u.op != "call_function":
            return False
        name = op_name(u.target)
        if name == "aten::alias" and depth < 4:   # (aot_autograd's alias of a saved output)
            users = [w for w in u.users if w in island]
            return bool(users) and all(loose(u, w, depth + 1) for w in users)
        spec = _UNIT_STRIDE_OPERANDS.get(name)
        if spec is None:
            return False
        n, dropout = spec
        return node in u.args[:n] and node not in u.args[n:] and node not in u.kwargs.values() and \
            len(u.args) > dropout and u.args[dropout] == 0
    users = [u for u in node.users if u in island]
    return bool(users) and all(loose(node, u) for u in users)


def _unit_stride(t) -> bool:
    """A tensor of at least one dimension whose last stride is 1 (or whose last size is 1)."""
    return isinstance(t, torch.Tensor) and t.dim() > 0 and (t.stride(-1) == 1 or t.size(-1) == 1)


def _channels_last(v) -> bool:
    """An example tensor laid out channels-last (and not also contiguous), or not a tensor."""
    if not isinstance(v, torch.Tensor):
        return True
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(v.dim())
    return fmt is not None and v.is_contiguous(memory_format=fmt) and not v.is_contiguous()


def _eager_layout(v, contiguous: bool = False) -> tuple | None:
    """(shape, strides) of an example tensor whose strides are not the contiguous ones (any
    strided tensor's with `contiguous`), else None."""
    if not isinstance(v, torch.Tensor) or (v.is_contiguous() and not contiguous) or v.layout != torch.strided:
        return None
    return tuple(v.shape), tuple(v.stride())


def _contiguous_layout(layout: tuple) -> bool:
    shape, strides = layout
    expect = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _restride(t, layout):
    """`t`'s values laid out with `layout`'s strides: dims of stride 0 are
    expanded from one slice, the rest is copied into a buffer with those
    strides (padding included). A layout whose elements overlap otherwise (an
    unfold's windows) cannot be written: `t` is returned as it is."""
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != layout[0] or tuple(t.stride()) == layout[1]:
        return t
    shape, strides = layout
    expanded = [i for i, (n, s) in enumerate(zip(shape, strides)) if s == 0 and n > 1]
    if expanded:
        one = t[tuple(slice(0, 1) if i in expanded else slice(None) for i in range(len(shape)))]
        return _restride(one, (tuple(one.shape), strides)).expand(shape)
    if not layouts.non_overlapping(shape, strides):
        return t
    return torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device).copy_(t)


def _dump(graph: CompiledGraph) -> None:
    """MLIRCAP_DUMP_DIR=dir: every stage of every graph, plus a repro script."""
    import shlex
    from pathlib import Path

    root = config.env("MLIRCAP_DUMP_DIR")
    if not root:
        return
    d = Path(root) / graph.name
    d.mkdir(parents=True, exist_ok=True)
    (d / "fx_graph.py").write_text(graph.gm.code)
    if graph.fallback_reason:
        (d / "error.txt").write_text(graph.fallback_reason + "\n")
    if not graph.linalg_ir:
        return
    (d / "torch.mlir").write_text(graph.torch_ir)
    (d / "linalg.mlir").write_text(graph.linalg_ir)
    stages = [("fused", "fused.mlir"), ("llvm", "llvm.mlir")]
    for stage, name in stages:
        try:
            (d / name).write_text(graph.ir(stage))
        except Exception as e:  # noqa: BLE001 - a stage that fails is recorded, not fatal
            (d / (name + ".error.txt")).write_text(str(e))
    plan = getattr(graph.executable, "plan", None)
    if plan is not None:
        import json

        from .runtime.plan import plan_input_ir

        # the IR as the plan compiler took it (module marks: matmul / conv bias, layouts)
        (d / "plan_input.mlir").write_text(plan_input_ir(graph.linalg_ir, graph.device))
        wire = plan.to_json()
        (d / "plan.json").write_text(json.dumps({k: v for k, v in wire.items() if k != "ptx"}, indent=1))
        (d / "kernels.ptx").write_text(wire.get("ptx") or "")
    q = shlex.quote
    (d / "repro.sh").write_text(
        "#!/bin/sh\n# Reproduces each mlircap stage of this graph from linalg.mlir.\n"
        f"cd {q(str(d.resolve()))}\n"
        "mlircap-opt linalg.mlir --mlircap-fuse -o fused.mlir\n"
        + ("# the launch plan's kernels: its input, marked as the plan compiler takes it\n"
           "mlircap-opt plan_input.mlir --mlircap-fuse -o plan_fused.mlir\n" if plan is not None else "") +
        "mlircap-opt linalg.mlir --mlircap-cpu-pipeline -o llvm.mlir\n"
        f"mlircap-opt linalg.mlir --mlircap-gpu-pipeline='chip={config.DEFAULT_CHIP} "
        f"features={config.DEFAULT_PTX_FEATURES}' -o gpu.mlir\n")
    (d / "repro.sh").chmod(0o755)
    logs.log("progress", f"{graph.name}: stages dumped to {d}")


def _failure_report(graph: CompiledGraph, e: Exception) -> str:
    if isinstance(e, FrontendError):
        lines = [f"Stage '{e.stage}' (torch-mlir) rejected the graph."]
        if e.unsupported:
            lines.append("Unsupported ops:")
            lines += [f"  {op} at {loc or '<unknown location>'}" for op, loc in e.unsupported]
        else:
            msg = str(e).strip().splitlines()
            # a header ("Unable to parse module assembly:") and the parser's error under it
            errors = [m.strip() for m in msg[1:] if m.strip().startswith("error:")]
            lines.append((msg[0] + (" " + errors[0] if msg[0].endswith(":") and errors else "")) if msg
                         else repr(e))
            named = _unsupported_nodes(graph.gm, e)
            if named:
                lines.append("Unsupported ops:")
                lines += [f"  {v}" for v in dict.fromkeys(named.values())]
        return "\n".join(lines)
    msg = str(e).strip()
    return f"{type(e).__name__}: {msg}"


def _runs_nothing_compiled(c) -> bool:
    """No part of `c` runs a compiled kernel or library step: every part fell back,
    or only computes views (as_strided, which the captured graph does as well)."""
    from .partition import PartitionedGraph

    def compiled(fn) -> bool:
        return isinstance(fn, CompiledGraph) and fn.executable is not fn.gm and \
            not isinstance(fn.executable, _ViewProgram)

    if isinstance(c, PartitionedGraph):
        return not any(compiled(fn) for fn, *_ in c.steps)
    return isinstance(c, CompiledGraph) and not compiled(c)


_COMPILE_LOCK = threading.RLock()


def make_backend(options: Options | None = None, registry: list | None = None, eager_first: bool = False):
    """A torch.compile-style backend `(gm, example_inputs) -> callable`. `eager_first`
    (Dynamo's front): the callable runs the captured graph eagerly until one call of it
    completes (see _EagerFirst), and an assert statement's failure raises AssertionError."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    options = options or Options()
    from . import worker

    worker.prestart()   # its imports overlap the user's first (recording) call

    compiled_now: list = []   # forward graphs of the backend call in progress (under the lock)
    bounds_checked: list = []   # of them, those with bounds checks (bounds.py)
    inference_now: list = []   # (compiled, its aot graph) of inference graphs (no autograd)

    speculating: list = []   # the plan of a speculated graph being compiled (speculate.py)
    random_seen: list = []   # forward graphs that draw from torch's generator
    fw_reach: list = []      # the outputs each input of the forward just compiled reaches (_output_reach)
    fw_functions: list = []  # the captured graph's custom autograd.Function calls (_custom_function_calls)
    fw_trivial: list = []    # per forward compiled: whether it computes one small op at most (_one_small_op)
    eager_graph: list = []   # the captured graph with Python asserts (eager_first), for reruns

    def fw_compiler(gm, example_inputs):
        from .intmath import bool_adds_as_or, logical_ops_in_common_dtype

        bool_adds_as_or(gm)
        logical_ops_in_common_dtype(gm)
        reach = _output_reach(gm, frozenset(fw_functions)) if fw_functions else _output_reach(gm)
        fw_reach.append((reach, gm.meta.get("mlircap_num_fwd_outputs")))
        copies = _hoist_input_copies(gm)   # (after the reach: the outputs it adds come last)
        fw_trivial.append(_one_small_op(gm))
        expected = None
        if speculating:
            from .speculate import take_guards

            expected = take_guards(gm, speculating[0])
            speculating.append(expected)
            if expected is None:
                raise RuntimeError("mlircap: speculated data reads do not match the plan")
        from .partition import is_random

        if any(is_random(n) for n in gm.graph.nodes):
            random_seen.append(gm)
        compiled = _compile_bounds_checked(gm, example_inputs)
        if compiled is None:
            compiled = compile_partitioned(gm, example_inputs, options, registry)
            compiled_now.append(compiled)
        if expected:
            from .speculate import checked

            compiled = checked(compiled, expected)

        # (the forward's outputs past the user's are saved for the backward: left as they come)
        n_user = min(copies[0] if copies is not None else 1 << 62, gm.meta.get("mlircap_num_fwd_outputs", 1 << 62))
        eager_layouts = _output_layouts(gm, n_user)
        if copies is None and not eager_layouts:
            def run(args):
                return compiled(*args)
        elif copies is None:
            def run(args):
                return _as_eager_layouts(compiled(*args), eager_layouts)
        else:
            n_out, dsts = copies
            _transient_outputs(compiled, gm, n_out)

            def run(args):
                outs = compiled(*args)
                _copy_into([args[i] for i in dsts], outs[n_out:])
                return _as_eager_layouts(outs[:n_out], eager_layouts) if eager_layouts else outs[:n_out]

        run._boxed_call = True
        run.compiled = compiled
        return run

    def inference_compiler(gm, example_inputs):
        run = fw_compiler(gm, example_inputs)
        fw_reach.clear()   # no backward: _unreached_gradients_as_none would only cost each call
        inference_now.append((run.compiled, gm))
        return run

    def _compile_bounds_checked(gm, example_inputs):
        """`gm` compiled with its index ops bounds-checked (bounds.py), or None: no
        index op to check (or not on the CPU), or the checked graph did not compile
        whole (then `gm` is compiled as it was, its index ops as eager islands)."""
        from .bounds import BoundsChecked, add_bounds_checks

        device = _device_of(example_inputs, gm)
        if device == "cuda" and not config.env_flag("MLIRCAP_GPU_BOUNDS_CHECKS"):
            return None
        checked = copy.copy(gm)
        checked.graph = copy.deepcopy(gm.graph)
        flagged = add_bounds_checks(checked, device)
        if not any(n.meta.get("mlircap_bounds_checked") for n in checked.graph.nodes):
            return None
        graphs: list = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                compiled = compile_partitioned(checked, example_inputs, options, graphs)
            except MlircapCompileError:
                return None
        if _runs_nothing_compiled(compiled) or any(g.fallback_reason is not None for g in graphs):
            return None
        for w in caught:
            logs.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if registry is not None:
            registry.extend(graphs)
        compiled_now.append(compiled)
        if flagged:
            def unchecked():   # (after reruns: bounds.MAX_RERUNS)
                return compile_partitioned(gm, example_inputs, options, registry)

            compiled = BoundsChecked(compiled, checked, device, unchecked=unchecked)
            bounds_checked.append(compiled)
        return compiled

    def bw_compiler(gm, example_inputs):
        from .target import targeting

        with targeting(options.device):   # (aot_autograd compiles it at the first backward call)
            return _bw_compiler(gm, example_inputs)

    def _bw_compiler(gm, example_inputs):
        _drop_dead_random(gm)
        _evenly_distribute_as_cpu(gm, example_inputs)
        compiled = _compile_backward(gm, example_inputs)
        if compiled is not None:
            return compiled
        # As it is, the graph's inputs get the layouts aot_autograd traced it with: compiled forwards
        # return contiguous tensors where eager's saved activations are views, and the graph's
        # aten.view of a permute of one raised 'view size is not compatible with input tensor's
        # size and stride' out of loss.backward() (SegFormer's efficient attention)
        layouts = [_eager_layout(v) for v in example_inputs]
        if not any(layouts):
            return make_boxed_func(gm.forward)
        forward = gm.forward

        def as_traced(*args):
            return forward(*[_restride(a, lay) if lay is not None else a for a, lay in zip(args, layouts)])
        return make_boxed_func(as_traced)

    def _compile_backward(gm, example_inputs):
        """aot_autograd's backward graph compiled (CPU and CUDA), or None: it then runs as it is
        (torch's aten kernels, one call per decomposed op; MLIRCAP_COMPILE_BACKWARD=0 keeps that). Gradients
        of inputs that need none (None entries of the output) are put back around the compiled
        graph; a graph that does not compile whole or in parts runs as it is, silently (and never
        raises under strict=True: the backward was never held to it), its islands logged under
        'fallback' instead of warned about."""
        device = _device_of(example_inputs, gm)
        if not config.env_flag("MLIRCAP_COMPILE_BACKWARD") or device not in ("cpu", "cuda"):
            return None
        out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        outs = out.args[0]
        if not isinstance(outs, (list, tuple)):
            return None
        keep = [i for i, o in enumerate(outs) if isinstance(o, torch.fx.Node)]
        if not keep or any(o is not None and not isinstance(o, torch.fx.Node) for o in outs) or \
                any(not isinstance(outs[i].meta.get("val"), torch.Tensor) for i in keep):
            return None
        part = copy.copy(gm)
        part.graph = copy.deepcopy(gm.graph)
        part_out = next(n for n in reversed(part.graph.nodes) if n.op == "output")
        part_out.args = ([part_out.args[0][i] for i in keep],)
        part.recompile()
        graphs: list = []
        # (aot_autograd compiles a backward at its first call, from the thread running it: one at a
        # time with the forwards, as backend_inner compiles those)
        opts = dataclasses.replace(options, strict=False)
        with _COMPILE_LOCK, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                # (CUDA: index ops as the forward's, _compile_bounds_checked)
                compiled = _backward_bounds_checked(part, example_inputs, opts, graphs) if device == "cpu" else None
                if compiled is None:
                    compiled = compile_partitioned(part, example_inputs, opts, graphs)
            except Exception as e:  # noqa: BLE001 - the backward runs as it is, as before
                logs.log("fallback", f"backward graph runs as it is: {type(e).__name__}: {str(e)[:200]}")
                return None
        if _runs_nothing_compiled(compiled) or any(g.fallback_reason is not None for g in graphs):
            logs.log("fallback", "backward graph runs as it is: it did not compile (" + "; ".join(
                str(g.fallback_reason)[:300] for g in graphs if g.fallback_reason is not None) + ")")
            return None
        for w in caught:
            logs.log("fallback", f"backward graph: {str(w.message)[:500]}")
        if registry is not None:
            registry.extend(graphs)
        n, kind = len(outs), type(outs)

        def run(args):
            res = compiled(*args)
            full = [None] * n
            for i, r in zip(keep, res):
                full[i] = r
            return kind(full)

        run._boxed_call = True
        run.compiled = compiled
        return run

    def backend(gm, example_inputs):
        from .ddsplit import restoring_global_modes
        from .target import targeting

        # compiling runs the graph's grad-mode and autocast switch nodes (tracing, fake
        # propagation, speculation): one that stopped inside a torch.no_grad() or autocast
        # block, or a part of a split graph that ends inside one, left the block's state
        # (the rules follow options.device where named: target.py)
        with restoring_global_modes(), targeting(options.device):
            return _backend(gm, example_inputs)

    def _backend(gm, example_inputs):
        _wait_for_collectives(gm)
        kept = _keep_dead_raising_ops(gm, example_inputs)
        checks = None
        if kept is not None and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
            # a graph that is differentiated: capture's backward passes one gradient per
            # output of its own (graph_compile), so the kept ops run as a graph of their own,
            # with eager's kernels, before the compiled one
            checks = _eager_checks(kept[0], kept[1][0])
            if checks is None:
                # an op on the way to it writes state, draws random numbers or is no tensor
                # function _PURE lists (a beam search's last, unused reorder by indices a GRU
                # and a topk computed): computed again it would write or draw twice. It stays in
                # the compiled graph as an extra output instead (the differentiated outputs
                # come first and the extra ones are detached, dropped after the call), as in a
                # graph that is not differentiated; the graph ran eagerly before
                gm, kept = kept
            else:
                kept = None
        elif kept is not None:
            gm, kept = kept
        fn = _backend_kept(gm, example_inputs)
        if kept is None and checks is None:
            return fn
        if checks is not None:
            def run(*args):
                with torch.no_grad():
                    checks(*args)
                return fn(*args)
        else:
            n, as_list = kept

            def run(*args):
                res = fn(*args)
                return list(res[:n]) if as_list else tuple(res[:n])
        run.compiled = getattr(fn, "compiled", fn)
        return run

    def _backend_kept(gm, example_inputs):
        if not eager_first:
            return backend_parts(gm, example_inputs)
        eager = _with_python_asserts(gm)   # before anything rewrites gm
        random_before = len(random_seen)
        eager_graph[:] = [eager]
        try:
            fn = backend_parts(gm, example_inputs)
        finally:
            eager_graph.clear()
        if len(random_seen) > random_before:
            return fn   # eager's stream is not the compiled graph's: the same seed, one result
        return _EagerFirst(fn, eager)

    def backend_parts(gm, example_inputs):
        # (the graph as captured: a call whose .grad are not the compiled graph's runs it)
        original = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph)) if \
            any(_reads_grad(n) for n in gm.graph.nodes) else None
        # (rewritten on a copy: the caller runs `gm` itself if compiling fails, and the
        # rewritten graph takes the gradients as more arguments)
        hoisted = None if original is None else \
            _hoist_grad_reads(torch.fx.GraphModule(gm, copy.deepcopy(gm.graph)), example_inputs)
        if hoisted is not None:
            gm, example_inputs, owners = hoisted
            eager_graph.clear()   # the hoisted graph takes the grads as arguments
            fn = backend_inner(gm, example_inputs)
            examples = example_inputs[len(example_inputs) - len(owners):]

            def run(*args):
                grads = _grads_as_compiled(args, owners, examples)
                if grads is None:   # a .grad that is None (or laid out otherwise) at this call
                    return original(*args)
                return fn(*args, *grads)
            return run
        return backend_inner(gm, example_inputs)

    def backend_inner(gm, example_inputs):
        # aot_autograd keeps process-wide tracing state (patchers, fake
        # modes): graphs from several threads are compiled one at a time.
        with _COMPILE_LOCK:
            compiled_now.clear()
            bounds_checked.clear()
            inference_now.clear()
            fw_trivial.clear()
            autocast = torch._C._is_any_autocast_enabled()
            try:
                fn = _aot(gm, example_inputs)
            except MlircapCompileError:
                raise
            except torch._dynamo.exc.RestartAnalysis:
                # Dynamo's control flow (TensorifyScalarRestartAnalysis: trace again
                # with the float specialized), not a failure of the graph
                raise
            except Exception as e:
                from .ddsplit import is_data_dependent_error, restoring_global_modes, split_data_dependent
                from .saved_writes import is_saved_write_error, split_saved_writes

                # a tensor an op saved written in place later in the graph: eager's autograd raises
                # in the backward, aot_autograd's trace here; those ops run through torch
                if is_saved_write_error(e) and not options.strict:
                    split = split_saved_writes(gm, example_inputs, backend)
                    if split is not None:
                        return split

                # (under strict=True too: a speculated graph runs compiled, and a
                # guard that fails raises instead of rerunning eagerly)
                if is_data_dependent_error(e):
                    with restoring_global_modes():   # (it runs the graph)
                        spec = _speculate(gm, example_inputs)
                    if spec is not None:
                        return spec

                # an op fake tensors cannot run (data-dependent output shape, a meta
                # kernel that rejects what the real one takes) runs through torch, and
                # the graph is compiled around it; under strict=True only where nothing
                # runs through torch (ops computed at their bound, bounded.py)
                failure = None if is_data_dependent_error(e) else \
                    f"fake tensors cannot run it ({type(e).__name__}: {(str(e).strip() or repr(e)).splitlines()[0][:200]})"
                split = split_data_dependent(gm, example_inputs, backend, fake_failure=failure,
                                             strict=options.strict)
                if split is not None:
                    return split
                if options.strict:   # the capture front would run the graph eagerly
                    raise MlircapCompileError(f"aot_autograd could not trace the graph: "
                                              f"{type(e).__name__}: {str(e).strip()[:500]}") from e
                raise
            if compiled_now and all(_runs_nothing_compiled(c) for c in compiled_now):
                # Nothing compiled: run the captured graph as it is, with
                # eager's own kernels, not aot_autograd's decomposed graph.
                logs.log("fallback", "no part of the graph compiled; the captured graph runs as it is")
                return gm.forward
            if fw_trivial == [True] and not inference_now and not bounds_checked and not options.strict:
                # a differentiated graph computing one small op (a graph break's remainder: a cat of
                # a loss and logits): compiled, it fuses nothing and its call pays aot_autograd's
                # Function and wrappers (~80 us forward and backward) for eager's one kernel (~8 us)
                logs.log("fallback", "graph of one small op with gradients: the captured graph runs as it is")
                return gm.forward
            if bounds_checked:
                from .bounds import rerun_on_bad_index

                return rerun_on_bad_index(fn, eager_graph[0] if eager_graph else gm,
                                          any(b.uses_rng for b in bounds_checked), options.strict)
            if len(inference_now) == 1 and compiled_now == [inference_now[0][0]] and not autocast and \
                    not _output_layouts(inference_now[0][1]) and \
                    _aot_passes_through(inference_now[0][1], gm, example_inputs):
                # aot_autograd's runtime wrapper would only turn grad mode off around the
                # call (CompiledGraph does that itself) and check the output count: the
                # compiled graph is called directly (about 2 µs less per call)
                return inference_now[0][0]
            return fn

    def _speculate(gm, example_inputs):
        """`gm` compiled for the data-dependent decisions eager takes on the example
        inputs, guarded (speculate.py), or None."""
        from . import speculate

        plan = speculate.observe(gm, example_inputs)
        if plan is None:
            return None
        compiled_now.clear()
        bounds_checked.clear()
        inference_now.clear()
        speculating[:] = [plan]
        try:
            with speculate.answering(plan):
                fn = _aot(gm, example_inputs)
        except Exception:  # noqa: BLE001 - the split below runs the op through torch instead
            return None
        finally:
            taken = speculating[1:]
            speculating.clear()
        if len(taken) != 1 or not taken[0] or (compiled_now and all(_runs_nothing_compiled(c) for c in compiled_now)):
            return None
        logs.log("fallback", f"graph compiled for {len(plan)} data-dependent decision(s) taken as eager "
                             "took them on the example inputs, guarded")
        if bounds_checked:
            # a bounds check or an order statistic's tie flag (selection.py) set at some call: the
            # captured graph reruns with eager's kernels, as backend_inner's graphs do (it raised
            # mlircap.bounds.IndexOutOfRange to the program: topk of a tie after x[:, idx[0]])
            from .bounds import rerun_on_bad_index

            fn = rerun_on_bad_index(fn, eager_graph[0] if eager_graph else gm,
                                    any(b.uses_rng for b in bounds_checked), options.strict)
        def around(args):
            # once the data keeps taking another path: compiled around the op, which runs
            # through torch (what the graph got without speculation)
            from .ddsplit import split_data_dependent

            return split_data_dependent(gm, args, backend)

        return speculate.rerun_on_failed_guard(fn, gm, strict=options.strict, around=around)

    def _aot(gm, example_inputs):
        dupes = _duplicate_inputs(example_inputs)
        if dupes:
            return _deduplicated(gm, example_inputs, dupes, _aot)
        from .input_views import shared_input_views, views_after

        moved = shared_input_views(gm, example_inputs)   # aot's synthetic base: its view replay fails
        if moved:
            return views_after(gm, example_inputs, moved, _aot)
        from . import inplace_draws
        from .attention_masks import simplify_attention_masks
        from .leaf_writes import no_grad_leaf_writes

        no_grad_leaf_writes(gm, example_inputs)   # a write eager's autograd does not record
        from .inner_grads import retain_inner_grad_graphs
        retain_inner_grad_graphs(gm)   # an output autograd.grad differentiated through: aot's trace

        from .unfold_writes import written_through_unfold

        writer = written_through_unfold(gm)
        if writer is not None:   # (aot's inverse of unfold zeroes what no window covers)
            raise RuntimeError(f"{writer.name} writes in place through a view made by unfold: the graph runs "
                               "as captured")
        simplify_attention_masks(gm, example_inputs)
        inplace_draws.rewrite(gm)   # x.bernoulli_(p): eager's memory order, not bernoulli.p's
        from . import saved_versions
        from .ddsplit import restoring_global_modes
        from .lean_autograd import direct_forward, lean_functions
        from .saved_views import partition as saved_views_partition

        # (a failed trace restores them before the graph is tried again, speculated or split:
        # compiled with grad left off, a part of it became an inference graph)
        fw_reach.clear()
        fw_functions[:] = _custom_function_calls(gm)
        with restoring_global_modes(), eager_kernels_for_islands(), lean_functions():
            fn = aot_module_simplified(
                gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                inference_compiler=inference_compiler, decompositions=decomposition_table(),
                partition_fn=saved_views_partition,
                # writes to inputs (BatchNorm's running statistics, an in-place op on an
                # argument) stay in the graph as copy_ nodes: _hoist_input_copies
                keep_inference_input_mutations=True,
            )
        fn = direct_forward(fn)
        reach, n_returns = fw_reach[-1] if len(fw_reach) == 1 else (None, None)
        fw_reach.clear()
        fw_functions.clear()
        fn = _batch_norm_stats_unversioned(fn, _batch_norm_stats(gm))
        fn = saved_versions.checked(fn, saved_versions.saved_boundary(gm, example_inputs))
        return _unreached_gradients_as_none(fn, reach, n_returns) if reach is not None else fn

    # compiled CPU code runs on torch's thread count of each call; compile-time decisions that
    # depend on it read it through thread_reads.compile_threads (capture/guards.py's _GlobalState)
    backend.follows_threads = True
    return backend


# Elements up to which a differentiated graph of one op runs as captured (_one_small_op)
TRIVIAL_GRAPH_ELEMENTS = 1 << 16


def _one_small_op(gm: torch.fx.GraphModule) -> bool:
    """aot_autograd's forward graph `gm` computes at most one op besides views, on at most
    TRIVIAL_GRAPH_ELEMENTS result elements: nothing to fuse, and too little work for a
    compiled kernel to win back the per-call cost of the graph's autograd Function."""
    ops = 0
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        if isinstance(n.target, torch._ops.OpOverload) and n.target.is_view:
            continue
        ops += 1
        v = n.meta.get("val")
        if ops > 1 or not isinstance(v, torch.Tensor) or v.numel() > TRIVIAL_GRAPH_ELEMENTS:
            return False
    return True


_BN_STAT_ARGS = {torch.nn.functional.batch_norm: (1, 2, "running_mean", "running_var", 5, "training"),
                 torch.batch_norm: (3, 4, "running_mean", "running_var", 5, "training")}


def _batch_norm_stats(gm: torch.fx.GraphModule) -> frozenset[int]:
    """Positions of the captured graph's inputs that only training-mode batch norms write, as
    their running statistics. Eager's kernel updates them in place without a new version, while
    aot_autograd's copy of the new values back into them made one: an earlier call's backward
    node that saved them (eager's NativeBatchNormBackward saves the running statistics; a
    module recorded eagerly on its first call, then compiled in the same step: a SimCLR / VICReg
    projector applied to two views, bench/heldout8.py vicreg) raised 'modified by an inplace
    operation' in a backward eager runs."""
    found = set()
    for i, p in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        if not p.users:
            continue
        ok = True
        for u in p.users:
            spec = _BN_STAT_ARGS.get(u.target) if u.op == "call_function" else None
            if spec is None:
                ok = False
                break
            a_mean, a_var, k_mean, k_var, a_train, k_train = spec
            training = u.kwargs.get(k_train, u.args[a_train] if len(u.args) > a_train else False)
            stats = [u.args[a] if len(u.args) > a else u.kwargs.get(k) for a, k in ((a_mean, k_mean), (a_var, k_var))]
            others = [a for a in (*u.args, *u.kwargs.values()) if a is p]
            if training is not True or p not in stats or len(others) != sum(s is p for s in stats):
                ok = False
                break
        if ok:
            found.add(i)
    return frozenset(found)


def _duplicate_inputs(example_inputs) -> dict[int, int]:
    """{position: first position} of tensors passed more than once (capture hands a gradient read
    twice in one graph as two inputs: PGD's `grad = delta.grad.detach()` ... `delta.grad.zero_()`)."""
    first: dict[int, int] = {}
    dupes = {}
    for j, t in enumerate(example_inputs):
        if isinstance(t, torch.Tensor):
            i = first.setdefault(id(t), j)
            if i != j:
                dupes[j] = i
    return dupes


def _deduplicated(gm: torch.fx.GraphModule, example_inputs: list, dupes: dict[int, int], compile_fn):
    """`gm` compiled with each repeated input passed once (its placeholder's uses read the first
    one's), called so where the call passes the same tensors again, else run as it is.
    aot_autograd deduplicates such inputs itself, but when the graph also writes an input in
    place inside the graph (`delta.data[idx] = d`) its remove_dupe_metadata indexes past
    mutated_inp_runtime_indices (IndexError) and the whole graph ran uncompiled."""
    graph = torch.fx.Graph()
    val_map: dict = {}
    graph.output(graph.graph_copy(gm.graph, val_map))
    phs = [val_map[n] for n in gm.graph.nodes if n.op == "placeholder"]
    for j, i in dupes.items():
        phs[j].replace_all_uses_with(phs[i])
        graph.erase_node(phs[j])
    sub = torch.fx.GraphModule(gm, graph)
    keep = [k for k in range(len(example_inputs)) if k not in dupes]
    fn = compile_fn(sub, [example_inputs[k] for k in keep])
    pairs = tuple(dupes.items())

    def run(*args):
        if all(args[j] is args[i] for j, i in pairs):
            return fn(*[args[k] for k in keep])
        return gm(*args)

    run.__dict__.update(getattr(fn, "__dict__", {}))
    return run


def _batch_norm_stats_unversioned(fn, stats: frozenset[int]):
    """`fn` (aot_autograd's function of the captured graph) leaving the versions of the inputs
    at `stats` (_batch_norm_stats) as they were: aot's wrapper counts a version for each input
    the graph writes, and the copy of the new value back into it one more."""
    if not stats:
        return fn
    idx = tuple(sorted(stats))

    def run(*args):
        held = tuple(args[i] for i in idx)
        if not all(isinstance(t, torch.Tensor) and not t.is_inference() for t in held):
            return fn(*args)
        vers = tuple(t._version for t in held)
        out = fn(*args)
        torch._C._autograd._unsafe_set_version_counter(held, vers)
        return out

    run.__dict__.update(getattr(fn, "__dict__", {}))
    return run


def _hoist_input_copies(gm: torch.fx.GraphModule) -> tuple[int, list[int]] | None:
    """aot_autograd (keep_inference_input_mutations) ends a graph that writes its inputs with
    `aten.copy_(input, new_value)` nodes: BatchNorm's running statistics and batch count,
    an in-place op on an argument. torch-mlir imports value semantics only, and without
    the flag aot_autograd's runtime wrapper copied each new value back itself, one copy_
    call (and on CUDA a kernel launch, after a clone of the value out of the CUDA graph)
    per written input. Each such copy_ leaves the graph and its value becomes an extra
    output, after the graph's own: returns (the graph's output count, the input index of
    each extra output), or None when there is none. A copy_ is hoisted only where it is the
    last use of its input (functionalization guarantees that) and the last write to it, or
    where only the graph's output reads the input after it: an output that is the written
    input itself (`r = org.copy_(w.data.clamp_(-1, 1))` kept by a graph break) returns the new
    value instead (aot_autograd hands the input object back for it; before, the copy_ stayed
    and torch-mlir, value semantics only, rejected the graph: all of it ran eagerly)."""
    g = gm.graph
    out = g.output_node()
    outs = out.args[0]
    if not isinstance(outs, (list, tuple)):
        return None
    phs = [n for n in g.nodes if n.op == "placeholder"]
    order = {n: i for i, n in enumerate(g.nodes)}
    copy_ = torch.ops.aten.copy_.default
    hoisted, dead, dsts, returned = [], [], [], {}
    for i, p in enumerate(phs):
        writes = [u for u in p.users if u.op == "call_function" and u.target is copy_ and not u.users
                  and len(u.args) == 2 and not u.kwargs and u.args[0] is p and isinstance(u.args[1], torch.fx.Node)]
        writes.sort(key=order.__getitem__)
        if not writes or any(order[u] > order[writes[0]] for u in p.users if u not in writes and u is not out):
            continue   # the input is read after it was written (or written otherwise): left as it is
        hoisted.append(writes[-1])
        dead += writes[:-1]   # overwritten by the last one, and nothing reads in between
        dsts.append(i)
        if p in out.users and any(o is p for o in outs):
            returned[p] = writes[-1].args[1]
    if not hoisted:
        return None
    outs = [returned.get(o, o) if isinstance(o, torch.fx.Node) else o for o in outs]
    out.args = (tuple(outs) + tuple(c.args[1] for c in hoisted),)
    for c in dead + hoisted:
        g.erase_node(c)
    gm.recompile()
    return len(outs), dsts


def _copy_into(dsts: list, srcs) -> None:
    """dst.copy_(src) for each pair: one foreach call per device and dtype where shapes match."""
    groups: dict = {}
    for d, s in zip(dsts, srcs):
        if isinstance(s, torch.Tensor) and d.shape == s.shape and d.dtype == s.dtype and d.device == s.device:
            ds, ss = groups.setdefault((d.device, d.dtype), ([], []))
            ds.append(d)
            ss.append(s)
        else:
            d.copy_(s)
    for ds, ss in groups.values():
        if len(ds) == 1:
            ds[0].copy_(ss[0])
        else:
            torch._foreach_copy_(ds, ss)


def _transient_outputs(compiled, gm: torch.fx.GraphModule, n_out: int) -> None:
    """Tells a GPU executable that outputs n_out.. are copied into inputs before the call
    returns (_hoist_input_copies), so a CUDA graph replay may return them without a clone,
    except a value that is also one of the graph's own outputs (saved for backward)."""
    exe = getattr(compiled, "executable", None)
    mark = getattr(exe, "set_transient_outputs", None)
    if mark is None:
        return
    outs = gm.graph.output_node().args[0]
    kept = {id(o) for o in outs[:n_out]}
    mark({j for j in range(n_out, len(outs)) if id(outs[j]) not in kept and outs[j].op != "placeholder"})


_NO_GRAD_LIKE = {getattr(torch.ops.aten, n) for n in (
    "full_like", "ones_like", "zeros_like", "empty_like", "rand_like", "randn_like", "randint_like",
    "new_full", "new_ones", "new_zeros", "new_empty")}
# in-place fills (functionalized: aten.zero / aten.fill, decomposed to full_like) of a tensor with
# a gradient history: eager's autograd keeps the edge to it (ZeroBackward / FillBackward pass a
# zero gradient on), so its inputs get zero gradients, not None (`v = x @ w; v.zero_()`:
# fuzz_graphs --grad seed 3749's x.grad and w.grad were None from the compiled call on)
_FILLS_WITH_EDGE = {torch.ops.aten.zero, torch.ops.aten.fill}


def _carries_no_gradient(node: torch.fx.Node) -> bool:
    """`node`'s result has no gradient path to its tensor arguments: a factory taking only their
    shape and dtype (`ones_like(out)`: the output gradient of an autograd.grad in the graph), or
    a result of an integer or boolean dtype (comparisons, argmax, indices)."""
    t = node.target
    orig = node.meta.get("original_aten")
    if isinstance(orig, torch._ops.OpOverload) and orig.overloadpacket in _FILLS_WITH_EDGE:
        return False   # (x.zero_() decomposed to full_like(x, 0): autograd's ZeroBackward is an edge)
    if isinstance(t, torch._ops.OpOverload) and t.overloadpacket in _NO_GRAD_LIKE:
        return True
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not (val.is_floating_point() or val.is_complex())


def _no_grad_factory(node: torch.fx.Node) -> bool:
    """`node` makes a tensor from its arguments' shape and dtype alone, itself or as a step of
    such an op's decomposition (`ones_like` -> `full_like`)."""
    return any(isinstance(t, torch._ops.OpOverload) and t.overloadpacket in _NO_GRAD_LIKE
               for t in (node.target, node.meta.get("original_aten")))


def _inside_float_decomposition(node: torch.fx.Node, decomposed_floats: set) -> bool:
    """`node` is a step of a decomposed op (its original_aten another op) that also made a
    floating or complex value (`decomposed_floats`: such ops' names; the meta holds a new
    OpOverload object per node): the op, not the step, is what autograd differentiated."""
    orig = node.meta.get("original_aten")
    return isinstance(orig, torch._ops.OpOverload) and str(orig) != str(node.target) and str(orig) in decomposed_floats


def _custom_function_calls(gm: torch.fx.GraphModule) -> list[str]:
    """The names of the captured graph's nodes that call a custom autograd.Function's apply
    (directly or through fx_targets' trampoline, a closure over it)."""
    names = []
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        f = n.target
        for _ in range(3):   # (unwrap trampolines: closures over the callable)
            owner = getattr(f, "__self__", None)
            if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
                names.append(n.name)
                break
            cells = getattr(f, "__closure__", None) or ()
            f = next((c.cell_contents for c in cells if callable(c.cell_contents)), None)
            if f is None:
                break
    return names


def _from_captured(node: torch.fx.Node) -> set[str]:
    """The names of the captured graph's nodes an aot graph's node was traced from (its
    from_node chain)."""
    names: set[str] = set()
    todo = list(node.meta.get("from_node") or ())
    while todo:
        src = todo.pop()
        name = getattr(src, "name", None)
        if isinstance(name, str):
            names.add(name)
        todo.extend(getattr(src, "from_node", None) or ())
    return names


def _output_reach(gm: torch.fx.GraphModule, functions: frozenset = frozenset()) -> list[frozenset[int]] | None:
    """For each input of a forward graph, the positions of the graph's outputs it reaches through
    values that carry gradients (autograd's edges: a result of no gradient path stops it).
    `functions`: the captured graph's custom autograd.Function calls. Their forwards' steps are
    no cut: autograd connects a Function's outputs to all its inputs whatever the forward
    computes (a straight-through `where(w >= 0, 1., -1.)` passes the gradient its backward
    makes; cut at the comparison, the weight's gradient was dropped: bench/modules16_train.py
    binaryconnect), and each call's inputs reach all its outputs (a two-output Function whose
    second output the loss does not use: eager's backward got zeros for it and gave its input
    a zero .grad, which the reach through the forward's own data flow left None). None
    (nothing dropped) where the steps cannot be told apart."""
    out = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    outs = out.args[0] if out is not None else None
    if not isinstance(outs, (list, tuple)):
        return None
    # the aot nodes of each Function call: one autograd node, every input of it reaches every
    # output of it (its backward gets zeros for an output no gradient reached, and returns
    # gradients for all its inputs)
    calls: dict[str, list[torch.fx.Node]] = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and functions:
            for name in sorted(_from_captured(n) & functions)[:1]:
                calls.setdefault(name, []).append(n)
    if functions and not calls:
        return None
    inside = {n for nodes in calls.values() for n in nodes}
    # An integer / bool step inside the decomposition of an op with a floating result is no
    # autograd edge: autograd saw the op itself (cdist with p=0 counts differing features,
    # its formula gives x1 and x2 zero gradients, which cutting at its `ne` left None)
    decomposed_floats = {str(n.meta.get("original_aten")) for n in gm.graph.nodes if n.op == "call_function"
                         and isinstance(v := n.meta.get("val"), torch.Tensor) and (v.is_floating_point() or v.is_complex())}
    # (a factory of no gradient, `ones_like(out)` decomposed to full_like, stays a cut)
    cut = {n for n in gm.graph.nodes if n.op == "call_function" and _carries_no_gradient(n) and n not in inside
           and (_no_grad_factory(n) or not _inside_float_decomposition(n, decomposed_floats))}
    seed: dict[torch.fx.Node, set[int]] = {}
    for _ in range(len(calls) + 1):   # (a Function's inputs made by another Function: again)
        reach: dict[torch.fx.Node, set[int]] = {}
        for j, o in enumerate(outs):
            if isinstance(o, torch.fx.Node):
                reach.setdefault(o, set()).add(j)
        for n in reversed(gm.graph.nodes):   # users before producers
            if n.op == "output":
                continue
            mine = reach.setdefault(n, set())
            mine |= seed.get(n, set())
            for u in n.users:
                if u.op != "output" and u not in cut:
                    mine |= reach.get(u, set())
        joined = {}
        for nodes in calls.values():
            every = set().union(*(reach[n] for n in nodes))
            joined.update((n, every) for n in nodes)
        if joined == seed:
            break
        seed = joined
    return [frozenset(reach.get(n, ())) for n in gm.graph.nodes if n.op == "placeholder"]


def _unreached_gradients_as_none(fn, reach: list[frozenset[int]], n_returns: int | None = None):
    """aot_autograd's compiled function, whose backward leaves None the gradient of an input
    that reaches only outputs the backward passes no gradient for, as eager's autograd does:
    its CompiledFunction (an autograd.Function) materializes a missing output gradient as
    zeros, so an input feeding only an output the loss does not use (a second head, a
    returned intermediate) got a zero .grad where eager leaves None, and an optimizer then
    steps that parameter (momentum, weight decay) where eager's skips it (bench/fuzz_graphs.py
    --grad seed 26). Node hooks of each call's backward node see which gradients are
    missing (before materialization) and drop the gradients of such inputs. `n_returns`:
    how many of the forward graph's outputs are the node's (the rest are saved for the
    backward, which no gradient reaches)."""
    if not reach:
        return fn
    outputs = frozenset().union(*reach)
    if all(not r or r == outputs for r in reach):
        return fn   # every input reaches every output: a missing gradient never isolates one
    if n_returns is not None and all(not r or set(range(n_returns)) <= r for r in reach):
        # every input reaches every output of the node (and some saved values besides): a
        # gradient the node gets reaches every input, and without one it never runs. (The
        # hooks cost ~7 us of each training call's forward: an MLP's one output, where the
        # saved activations, reached by some inputs only, made the reach look uneven.)
        return fn
    dropped: dict[tuple, frozenset] = {}   # which gradients are missing -> the inputs left None

    def to_drop(none: tuple) -> frozenset:
        drop = dropped.get(none)
        if drop is None:   # (once per pattern: a Python loop over every input's reach, ~40 us)
            n = len(none)
            drop = dropped[none] = frozenset(i for i, r in enumerate(reach) if r and all(j >= n or none[j] for j in r))
        return drop

    def run(*args):
        out = fn(*args)
        node = next((t.grad_fn for t in (out if isinstance(out, (list, tuple)) else (out,))
                     if isinstance(t, torch.Tensor) and t.grad_fn is not None
                     and type(t.grad_fn).__name__ == "CompiledFunctionBackward"), None)
        if node is not None:
            missing: list = []
            node.register_prehook(lambda grads: missing.append([g is None for g in grads]))

            def post(grad_inputs, _grad_outputs):
                if not missing or len(grad_inputs) != len(reach):
                    return None
                drop = to_drop(tuple(missing[-1]))
                if not drop or all(grad_inputs[i] is None for i in drop):
                    return None
                return tuple(None if i in drop else g for i, g in enumerate(grad_inputs))
            node.register_hook(post)
        return out

    run.__dict__.update(getattr(fn, "__dict__", {}))
    return run


def _backward_bounds_checked(gm: torch.fx.GraphModule, example_inputs, options: Options, graphs: list):
    """A backward graph `gm` with index ops compiled bounds-checked, as _compile_bounds_checked compiles
    forwards (erfinv's gradient reads special_erf's tables at indices computed from the data): a call
    whose check fails runs `gm` as it is. None where it has no index op to check or did not compile
    whole (it is then compiled with its index ops as eager islands)."""
    from .bounds import BoundsChecked, add_bounds_checks, rerun_on_bad_index
    from .partition import is_random

    checked = copy.copy(gm)
    checked.graph = copy.deepcopy(gm.graph)
    flagged = add_bounds_checks(checked, "cpu")
    if not any(n.meta.get("mlircap_bounds_checked") for n in checked.graph.nodes):
        return None
    mine: list = []
    try:
        compiled = compile_partitioned(checked, example_inputs, options, mine)
    except Exception:  # noqa: BLE001 - compiled unchecked instead
        return None
    if _runs_nothing_compiled(compiled) or any(g.fallback_reason is not None for g in mine):
        return None
    graphs.extend(mine)
    if not flagged:
        return compiled
    def unchecked():   # (after reruns: bounds.MAX_RERUNS)
        return compile_partitioned(gm, example_inputs, options, graphs)

    return rerun_on_bad_index(BoundsChecked(compiled, checked, "cpu", unchecked=unchecked), gm,
                              any(is_random(n) for n in gm.graph.nodes), strict=False)


def _reads_grad(node: torch.fx.Node) -> bool:
    """`node` is `getattr(x, "grad")` (as capture records `p.grad`: a trampoline over getattr)."""
    if node.op != "call_function" or len(node.args) != 2 or node.args[1] != "grad" or node.kwargs:
        return False
    t = node.target
    if t is getattr:
        return True
    for c in getattr(t, "__closure__", None) or ():
        try:
            if c.cell_contents is getattr:
                return True
        except ValueError:   # an empty cell
            pass
    return False


def _inplace_root(node):
    """The value an in-place Tensor method's result is (`p.addcdiv_(m, d)` returns p, and
    capture records a later `p.grad` on that result): followed back through such calls."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.args and \
            isinstance(node.args[0], torch.fx.Node):
        name = getattr(node.target, "__name__", "")
        if not (name.endswith("_") and not name.endswith("__") and getattr(torch.Tensor, name, None) is node.target):
            break
        node = node.args[0]
    return node


def _hoist_grad_reads(gm: torch.fx.GraphModule, example_inputs):
    """A graph reading `p.grad` of an input (an optimizer step or a gradient returned after
    a backward in the function): aot_autograd traces with its own tensors for the inputs,
    whose .grad is None, so the graph failed to compile and ran uncompiled. Each such
    read becomes one more input, the caller's `args[i].grad` passed at each call: (the
    rewritten graph, its example inputs, the input positions whose .grad follow), or None."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(phs)}
    reads = [n for n in gm.graph.nodes if _reads_grad(n) and _inplace_root(n.args[0]) in index]
    reads = [n for n in reads if isinstance(example_inputs[index[_inplace_root(n.args[0])]], torch.Tensor)]
    if not reads:
        return None
    owners, extra = [], []
    last = phs[-1]
    for k, n in enumerate(reads):
        i = index[_inplace_root(n.args[0])]
        with gm.graph.inserting_after(last):
            ph = gm.graph.placeholder(f"grad_of_in{i}_{k}")
        last = ph
        n.replace_all_uses_with(ph)
        gm.graph.erase_node(n)
        owners.append(i)
        # the example's .grad as the graph will read it; where the function already set it
        # to None again (`p.grad = None` after the step: the graph is compiled after the
        # call), a gradient of the parameter's own layout (`_grads_as_compiled` checks it)
        g = example_inputs[i].grad
        extra.append(g if isinstance(g, torch.Tensor) else torch.zeros_like(example_inputs[i]))
    gm.recompile()
    return gm, list(example_inputs) + extra, owners


def _grads_as_compiled(args, owners: list, examples: list) -> list | None:
    """The `.grad` of each hoisted input of a call, or None where one is not a tensor laid out
    as the graph was compiled for (None: eager's `p.grad` of that call is another value)."""
    grads = []
    for i, ex in zip(owners, examples):
        g = args[i].grad
        if not isinstance(g, torch.Tensor) or g.shape != ex.shape or g.dtype != ex.dtype or \
                g.device != ex.device or g.stride() != ex.stride() or type(g) is not type(ex):
            return None
        grads.append(g)
    return grads


def _wait_for_collectives(gm: torch.fx.GraphModule) -> None:
    """A functional collective's result waited for where the graph has it. Run eagerly
    (as capture records it), ``torch.distributed._functional_collectives`` wraps the
    in-flight result of ``_c10d_functional.all_reduce`` & co. in an AsyncCollectiveTensor
    (``_c10d_functional._wrap_tensor_autograd``), a tensor subclass that waits when an op
    first reads it; a compiled graph reading it read memory the collective had not
    written (or, through the wrapper, no memory at all: a crash). As torch does when it
    traces, the wrap becomes ``_c10d_functional.wait_tensor``, an op of the graph that
    runs through torch in program order."""
    changed = False
    for n in gm.graph.nodes:
        t = n.target
        if n.op != "call_function":
            continue
        if isinstance(t, torch._ops.OpOverload):
            name = t.name()
        elif isinstance(t, torch._ops.OpOverloadPacket):
            name = t._qualified_op_name
        else:
            continue
        if name == "_c10d_functional::_wrap_tensor_autograd":
            n.target = torch.ops._c10d_functional.wait_tensor.default
            changed = True
    if changed:
        gm.recompile()


# Ops whose eager kernels raise for the values in their tensor arguments (an index out of
# range, an integer division by zero, a class target outside the classes, a negative count, a
# matrix that is not positive-definite): the bounds checks (bounds.py) and library calls that
# raise as eager does only run where the op is in the graph aot_autograd traces, which drops
# every result nothing reads.
_RAISING_OPS = frozenset((
    "fmod", "remainder", "floor_divide", "div", "divide", "floordiv", "rfloordiv", "mod", "rmod",
    "truediv", "rtruediv", "getitem", "index_select", "gather", "take", "take_along_dim", "embedding",
    "embedding_bag", "index_add", "index_copy", "index_fill", "index_put", "index_reduce", "scatter",
    "scatter_add", "scatter_reduce", "bincount", "repeat_interleave", "multinomial", "one_hot",
    "nll_loss", "cross_entropy", "multi_margin_loss", "multilabel_margin_loss", "ctc_loss",
    "searchsorted", "cholesky", "linalg_cholesky", "cholesky_ex", "inv", "inverse", "solve",
    "histc", "bernoulli", "binary_cross_entropy", "masked_scatter", "put", "index_put_", "pow",
    # LAPACK's checks: an SVD or symmetric eigensolver of a matrix with NaN / inf ('failed to
    # converge', _LinAlgError), eig of one (RuntimeError), a singular matrix (tensorops fuzz
    # seed 2716: an unused matrix_norm(v, 2) of log_softmax rows of -inf raised in eager)
    "svd", "linalg_svd", "linalg_svdvals", "linalg_matrix_norm", "linalg_norm", "norm", "nuclear_norm",
    "linalg_eigh", "linalg_eigvalsh", "linalg_eig", "linalg_eigvals", "linalg_pinv", "pinverse",
    "linalg_matrix_rank", "linalg_lstsq", "linalg_cond", "linalg_inv", "linalg_solve"))


def _keep_dead_raising_ops(gm: torch.fx.GraphModule, example_inputs=None):
    """A captured op whose result nothing reads still runs in eager, and raises there for its
    data (x1 % x1 with a zero in x1, x[idx] with idx out of range): aot_autograd's trace drops
    it, and the compiled graph returned. Each such node (_RAISING_OPS, taking a tensor computed
    in the graph or given to it) makes an extra output of `gm` (_detached_leaves); returns (the number
    of the graph's own outputs, whether they are a list), the rewritten copy of `gm` first, or
    None where there is none. Arithmetic (_ARITHMETIC_RAISING) with a floating result is not
    kept (`example_inputs` given): it never raises (a float division, or pow, of a dead KL
    term in a differentiated graph made the whole graph run eagerly: userops --grad seed 8)."""
    out = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    if out is None or not isinstance(out.args[0], (tuple, list)):
        return None
    live = _live_nodes(gm.graph, out)
    dead = []
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method") and n not in live and _kept(n):
            dead.append(n)
    if example_inputs is not None and any(_op_name(n) in _ARITHMETIC_RAISING for n in dead):
        floating = _floating_results(gm, example_inputs)
        dead = [n for n in dead if not (_op_name(n) in _ARITHMETIC_RAISING and n.name in floating)]
    if not dead:
        return None
    # rewritten on a copy: where the backend gives up, the caller runs `gm` itself
    graph = copy.deepcopy(gm.graph)
    gm = torch.fx.GraphModule(gm, graph)
    names = {n.name for n in dead}
    dead = [n for n in graph.nodes if n.name in names]
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    res = out.args[0]
    extra = []
    for n in dead:
        with gm.graph.inserting_after(n):
            extra.append(gm.graph.call_function(_detached_leaves, (n,)))
    out.args = (type(res)(list(res) + extra),)
    gm.recompile()
    return gm, (len(res), isinstance(res, list))


def _eager_checks(kept: torch.fx.GraphModule, n: int):
    """The graph of `kept` (_keep_dead_raising_ops' copy) that computes its extra outputs
    alone, run with eager's kernels; None unless they read the graph's inputs only: an op
    computed again would write its state again (a training batch_norm's running statistics:
    bench/fuzz_graphs.py seed 204 --families modules) or draw random numbers again."""
    from .capture.draws import _node_draws

    graph = copy.deepcopy(kept.graph)
    out = next(x for x in reversed(graph.nodes) if x.op == "output")
    out.args = (tuple(out.args[0][n:]),)
    graph.eliminate_dead_code()
    for x in graph.nodes:
        if x.op in ("placeholder", "output") or x.target is _detached_leaves:
            continue
        if x.op not in ("call_function", "call_method"):
            return None
        name = str(x.target if isinstance(x.target, str) else getattr(x.target, "__name__", x.target))
        if "out" in x.kwargs or name.endswith("_") and not name.endswith("__") or \
                name.strip("_") not in _RAISING_OPS and name.strip("_") not in _PURE:
            return None
        if _node_draws(x):
            # a kept op that draws (bernoulli, multinomial raise on bad probabilities), or one on
            # the way to a kept op: computed again here, it drew its numbers a second time, before
            # the graph's own draws (--grad seed 2981: torch.bernoulli read from rand(6)[3:6])
            return None
    return torch.fx.GraphModule(kept, graph)


# Tensor functions that write no state and draw no random numbers: what _eager_checks may
# compute again on the way to a kept op.
_PURE = frozenset((
    "view", "reshape", "flip", "permute", "transpose", "t", "contiguous", "clone", "unsqueeze", "squeeze",
    "expand", "expand_as", "flatten", "unflatten", "narrow", "select", "float", "double", "half", "long",
    "int", "bool", "to", "type", "abs", "neg", "add", "sub", "mul", "radd", "rsub", "rmul", "exp", "log",
    "sigmoid", "tanh", "relu", "softmax", "log_softmax", "sum", "mean", "amax", "amin", "argmax", "argmin",
    "max", "min", "clamp", "where", "arange", "zeros_like", "ones_like", "full_like", "eq", "ne", "lt",
    "le", "gt", "ge", "sign", "round", "floor", "ceil", "trunc", "cat", "stack", "roll", "sort", "argsort",
    # attention and masks on the way to a kept division (--grad --families userops seed 20)
    "matmul", "mm", "bmm", "einsum", "masked_fill", "invert", "bitwise_not", "logical_not", "logical_and",
    "logical_or", "softplus", "sqrt", "square", "tril", "triu", "nan_to_num", "cumsum"))


# _RAISING_OPS that raise only on integer operands (a division or remainder by zero, an integer
# to a negative integer power): with a floating (or complex) result they never raise.
_ARITHMETIC_RAISING = frozenset((
    "fmod", "remainder", "floor_divide", "div", "divide", "floordiv", "rfloordiv", "mod", "rmod", "truediv",
    "rtruediv", "pow"))


def _op_name(n: torch.fx.Node) -> str:
    return str(n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")).strip("_")


def _floating_results(gm: torch.fx.GraphModule, example_inputs) -> set:
    """Names of the nodes of `gm` whose result is a floating or complex tensor, found by
    running a copy of it on fake tensors of `example_inputs`; empty where that fails."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    try:
        copy_gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            FakeTensorProp(copy_gm, mode).propagate(*example_inputs)
    except Exception:  # noqa: BLE001 - every candidate stays kept
        return set()
    return {n.name for n in copy_gm.graph.nodes
            if isinstance(v := n.meta.get("val"), torch.Tensor) and (v.is_floating_point() or v.is_complex())}


def _kept(n: torch.fx.Node) -> bool:
    """`n` calls an op of _RAISING_OPS on a tensor the graph computes or is given."""
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    name = str(name).strip("_")
    if name not in _RAISING_OPS:
        return False
    args = list(n.args) + list(n.kwargs.values())
    if name == "getitem":      # x[idx] of a tensor index (not a tuple's item or x[1:])
        args = args[1:]
    return any(_has_node(a) for a in args)


def _live_nodes(graph: torch.fx.Graph, out: torch.fx.Node) -> set:
    """The nodes the graph's outputs and its side-effecting nodes read, transitively: a
    raising op read only by unused ones (an EmbeddingBag's result viewed, the view unused:
    bench/fuzz_graphs.py seed 410 --families modules) is dropped with them."""
    live: set = set()
    stack = [out] + [n for n in graph.nodes if n.op in ("call_function", "call_method") and _writes(n)]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live


def _writes(n: torch.fx.Node) -> bool:
    """A captured call that may write state (an in-place method, out=, setitem, an op FX
    itself keeps): its operands are live."""
    name = str(n.target if isinstance(n.target, str) else getattr(n.target, "__name__", n.target))
    if "out" in n.kwargs or "setitem" in name or name.endswith("_") and not name.endswith("__"):
        return True
    try:
        return n.is_impure()
    except Exception:  # noqa: BLE001 - an FX that cannot tell: keep it
        return True


def _has_node(a) -> bool:
    if isinstance(a, torch.fx.Node):
        return True
    if isinstance(a, (tuple, list)):
        return any(_has_node(b) for b in a)
    return False


def _detached_leaves(x):
    """The sum of an op's result (a tensor; the sums of a tuple's tensors stacked), detached:
    one small output that makes the op run, never differentiated, aliasing nothing."""
    ts = [x] if isinstance(x, torch.Tensor) else [t for t in x if isinstance(t, torch.Tensor)] \
        if isinstance(x, (tuple, list)) else []
    if len(ts) == 1:
        return ts[0].detach().sum()
    return torch.stack([t.detach().sum().to(torch.float64) for t in ts]) if ts else torch.zeros(0)


def _evenly_distribute_as_cpu(gm: torch.fx.GraphModule, example_inputs) -> None:
    """The gradient of a full min / max / median (autograd's evenly_distribute_backward) as
    eager's CPU formula computes it: zeros with grad / count written where the input equals
    the result (masked_fill), where aot_autograd traces its form for CUDA and tensor subclasses,
    `mask * (grad / count)`: a NaN or infinite upstream gradient made every other element's
    gradient NaN (0 * inf) where eager's is 0 (--grad seed 1487: x.min() feeding addcmul with
    an inf). The traced form is matched exactly: mul(logical_or(eq(x, v), logical_and(isnan(x),
    isnan(v))), div(g, sum(mask))), on the CPU only (CUDA's eager formula is the product)."""
    if _device_of(example_inputs, gm) != "cpu":
        return
    aten = torch.ops.aten

    def is_call(n, *targets):
        return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets

    changed = False
    for n in list(gm.graph.nodes):
        if not is_call(n, aten.mul.Tensor) or len(n.args) != 2:
            continue
        mask, value = n.args
        if not (is_call(mask, aten.logical_or.default) and is_call(value, aten.div.Tensor)):
            continue
        eq, both_nan = mask.args
        if not (is_call(eq, aten.eq.Tensor) and is_call(both_nan, aten.logical_and.default)
                and all(is_call(a, aten.isnan.default) for a in both_nan.args)
                and [a.args[0] for a in both_nan.args] == list(eq.args)
                and is_call(value.args[1], aten.sum.dim_IntList, aten.sum.default) and value.args[1].args[0] is mask):
            continue
        with gm.graph.inserting_before(n):
            zero = gm.graph.call_function(aten.scalar_tensor.default, (0.0,),
                                          {"dtype": n.meta["val"].dtype} if "val" in n.meta else {})
            if "val" in n.meta:
                zero.meta["val"] = torch.empty((), dtype=n.meta["val"].dtype, device=n.meta["val"].device)
            new = gm.graph.call_function(aten.where.self, (mask, value, zero))
            new.meta.update(n.meta)
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        changed = True
    if changed:
        gm.recompile()


def _drop_dead_random(gm: torch.fx.GraphModule) -> None:
    """Random ops whose results nothing reads, erased from a backward graph. The
    partitioner copies a forward random op into the backward graph with the
    factories feeding it (Dropout2d's bernoulli of a mask the gradient does not
    need: an input without grad); FX's dead code elimination keeps it, as random ops
    are impure, so every backward drew from torch's generator where eager's draws
    nothing, and random results after it differed from eager's. A backward never
    draws (autograd's formulas read the masks the forward saved)."""
    from .partition import is_random

    dead = [n for n in gm.graph.nodes if n.op == "call_function" and not n.users and is_random(n)]
    if not dead:
        return
    for n in dead:
        gm.graph.erase_node(n)
    gm.graph.eliminate_dead_code()   # the factories that fed them
    gm.recompile()


def _aot_passes_through(fw: torch.fx.GraphModule, gm: torch.fx.GraphModule, example_inputs) -> bool:
    """aot_autograd compiled `gm` into the inference graph `fw` whose runtime wrapper has
    nothing to do but call it with grad mode off: `fw` takes exactly the inputs of `gm`
    (no parameters lifted, no duplicate inputs removed, no effect tokens, no RNG state),
    all plain tensors, and returns exactly `gm`'s outputs (no mutated input written
    back, no intermediate base), distinct tensors none of which is a graph input or a
    view of one (the wrapper would regenerate those as views of the caller's tensors;
    with no input requiring grad, a view of an intermediate is returned as it is).
    Under autocast (the wrapper turns it off around the call), with functionalized RNG
    or tensor subclasses it is kept."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if torch._functorch.config.functionalize_rng_ops:
        return False
    if not all(isinstance(x, torch.Tensor) and not is_traceable_wrapper_subclass(x) for x in example_inputs):
        return False
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        return False
    phs = [n for n in fw.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(example_inputs) or len([n for n in gm.graph.nodes if n.op == "placeholder"]) != len(phs):
        return False
    user_outs = torch.utils._pytree.tree_leaves(gm.graph.output_node().args[0])
    outs = fw.graph.output_node().args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != len(user_outs) or len({id(o) for o in outs}) != len(outs):
        return False
    for o in outs:
        v = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        if not isinstance(v, torch.Tensor) or is_traceable_wrapper_subclass(v) or v.requires_grad or \
                _may_alias_input(o):
            return False
    return True


def _may_alias_input(node: torch.fx.Node) -> bool:
    """`node` is a placeholder or may be a view of one: a chain of operations that return
    a view of (alias) an argument (schema alias annotations; getitem of a multi-output
    view, _unsafe_view and anything not an aten operation counted as views too) reaches
    a placeholder."""
    import operator

    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            return True
        if n.op != "call_function":
            return True
        t = n.target
        if isinstance(t, torch._ops.OpOverload) and t is not torch.ops.aten._unsafe_view.default and \
                all(r.alias_info is None for r in t._schema.returns):
            continue   # a fresh tensor
        if t is not operator.getitem and not isinstance(t, torch._ops.OpOverload):
            return True
        todo.extend(a for a in n.all_input_nodes)
    return False


class _EagerFirst:
    """Dynamo's front: `gm` (the captured graph) runs eagerly until one call of it
    completes, then `fn` (its compiled form) runs. Fake tensors do not run eager's checks
    of dtypes and layouts (argmax of a bool tensor, an in-place add of two overlapping
    views of one input, bfloat16 cdist raise in eager, not in the meta kernels), so a
    compiled graph returned a result where eager raises; a check that depends only on
    what Dynamo guards (dtypes, shapes, strides, aliasing) raises on every call as
    eager's, a graph that runs once runs compiled from then on. This is the recording
    run of mlircap's own capture front (which runs the function eagerly first). Not for
    graphs that draw random numbers: eager's stream is not the compiled graph's, and
    the same seed must give the same result on every call."""

    def __init__(self, fn, gm: torch.fx.GraphModule):
        self.fn, self.gm, self.ran = fn, gm, False

    def __call__(self, *args):
        if self.ran:
            return self.fn(*args)
        out = self.gm.forward(*args)   # not gm(): FX prints its own report of an error
        self.ran = True
        return out


def _python_assert(cond, msg=None):
    """An assert statement on a tensor: AssertionError as eager's (Dynamo's
    _assert_async raises RuntimeError)."""
    if not bool(cond):
        raise AssertionError(*([] if msg in (None, _DYNAMO_ASSERT_MSG) else [msg]))


_DYNAMO_ASSERT_MSG = "assertion error"   # Dynamo's message of an assert without one


def _with_python_asserts(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of Dynamo's graph `gm` (its own graph, the same attributes) whose
    `torch._assert_async(cond, msg)` nodes made from assert statements (Dynamo's only
    source of them; a source line shown that is not an assert keeps the call) raise
    AssertionError as the statement does."""
    graph = copy.deepcopy(gm.graph)
    changed = False
    for n in graph.nodes:
        if n.op != "call_function" or n.target is not torch._assert_async or len(n.args) != 2:
            continue
        frame = (n.meta.get("stack_trace") or "").rstrip().split('File "')[-1].splitlines()[1:]
        source = [ln.strip() for ln in frame if ln.strip() and set(ln.strip()) - set("~^")]
        if source and not source[0].startswith("assert"):
            continue
        n.target = _python_assert
        changed = True
    out = torch.fx.GraphModule(gm, graph if changed else gm.graph)
    out.meta.update(gm.meta)
    return out   # compiled now (a lazy module's forward would call it through FX's wrapper)


def mlircap_backend(gm, example_inputs, **kwargs):
    """Entry point registered as torch.compile(backend="mlircap")."""
    return make_backend(Options(**kwargs), eager_first=True)(gm, example_inputs)
