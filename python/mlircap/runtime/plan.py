"""Launch plans: what the compiler core hands the runtime.

The contract (JSON wire format, typed records, validation) is in schema.py.
`PlanExecutor` holds what the CPU and CUDA executors share: value tensors
(inputs, buffers from torch's allocator, views, constants) and library calls
through torch. Subclasses launch the kernels.
"""
from __future__ import annotations

import re

import torch

from .. import config
from .schema import DTYPES, KernelStep, LibraryStep, Plan, PlanError, Value

__all__ = ["DTYPES", "LIBRARY", "Plan", "PlanError", "PlanExecutor", "mark_layout", "mark_matmul_bias",
           "mark_round_once"]


def _conv2d(x, w, st: LibraryStep, groups: int = 1, bias=None):
    # padding: the zero padding of the input, applied by the convolution (the
    # plan passes the unpadded input: see convInputPadding in KernelUtils.h).
    # bias: the step's third operand where it has one (CPU plans: mlircap-library-init
    # under mlircap.conv_bias), added by the library inside its accumulation as eager's
    return torch.nn.functional.conv2d(x, w, bias, stride=st.strides or (1, 1), padding=st.padding or (0, 0),
                                      dilation=st.dilations or (1, 1), groups=groups)


def _bias(ins):
    return ins[2] if len(ins) > 2 else None


def _conv2d_depthwise(ins, st: LibraryStep):
    # w: (channels, kh, kw), one filter per input channel
    x, w = ins[0], ins[1]
    if x.is_cpu and x.dim() == 4 and x.shape[2] * x.shape[3] <= w.shape[1] * w.shape[2]:
        # a map no larger than the window (ConvNeXt's 7x7 convolutions on its last stages' 2x2
        # and 1x1 maps): oneDNN's NCHW depthwise path is slow there, its NHWC one is not (1 thread,
        # Zen 3, float32 7x7: 2x128x2x2 264 us against 56 with the copies, 2x256x1x1 352 against
        # 50, 2x64x4x4 68 against 58; larger maps lose to the copies). The strides are NHWC's also
        # for a 1x1 map (its NCHW strides pass for channels-last too, and keep the NCHW path).
        # (Float32 plans run depthwise convolutions in the core's own kernel; this serves the
        # others: bf16/f16, computed in float32 where the host has no native 16-bit kernels.)
        n, c, h, wd = x.shape
        x = torch.empty_strided(x.shape, (h * wd * c, 1, wd * c, c), dtype=x.dtype, device=x.device).copy_(x)
    return _conv2d(x, w.unsqueeze(1), st, groups=x.shape[1], bias=_bias(ins))


def _conv2d_nhwc(ins, st: LibraryStep):
    # x (N, H, W, C), w (F, kh, kw, C), result (N, OH, OW, F): torch takes them as
    # channels-last NCHW views (mlircap-conv-channels-last; cuDNN's native layout)
    x, w = ins[0], ins[1]
    return _conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), st, bias=_bias(ins)).permute(0, 2, 3, 1)


def _conv2d_depthwise_nhwc(ins, st: LibraryStep):
    # x (N, H, W, C), w (kh, kw, C), result (N, OH, OW, C): channels-last NCHW views for
    # torch (cuDNN's NHWC depthwise kernels), the filter as (C, 1, kh, kw)
    x, w = ins[0], ins[1]
    out = _conv2d(x.permute(0, 3, 1, 2), w.permute(2, 0, 1).unsqueeze(1), st, groups=x.shape[3], bias=_bias(ins))
    return out.permute(0, 2, 3, 1)


def _widened(ins: list, out: torch.Tensor) -> list:
    """bf16/f16 operands of a library step with a wider float result (mlircap-narrow-library-
    operands keeps the result wide where it is used wide), converted to the result's type:
    torch's bf16 kernels return a bf16 result, rounded; the product of the converted
    operands (exact products, f32 sums) is the wide result."""
    if out.dtype.is_floating_point and out.dtype.itemsize > ins[0].dtype.itemsize:
        return [x.to(out.dtype) if x.dtype.is_floating_point else x for x in ins]
    return ins


def _mm(a, b, ins):
    # a third operand is the bias mlircap-matmul-bias gave the matmul: eager's addmm
    return torch.mm(a, b) if len(ins) == 2 else torch.addmm(ins[2], a, b)


LIBRARY = {
    "matmul": lambda ins, st: _mm(ins[0], ins[1], ins),
    "matmul_transpose_b": lambda ins, st: _mm(ins[0], ins[1].t(), ins),
    "matmul_transpose_a": lambda ins, st: torch.mm(ins[0].t(), ins[1]),
    "batch_matmul": lambda ins, st: torch.bmm(ins[0], ins[1]),
    "batch_matmul_transpose_b": lambda ins, st: torch.bmm(ins[0], ins[1].transpose(1, 2)),
    "conv2d_nchw_fchw": lambda ins, st: _conv2d(ins[0], ins[1], st, bias=_bias(ins)),
    "conv2d_depthwise_nchw_chw": _conv2d_depthwise,
    "conv2d_nhwc_fhwc": _conv2d_nhwc,
    "conv2d_depthwise_nhwc_hwc": _conv2d_depthwise_nhwc,
}
# Library ops with an out= form: (torch function, operands from the step's inputs).
# The result is written into the plan's buffer directly; without an out= form
# it is computed into a fresh tensor and copied (one more kernel per call).
_OUT_VARIANTS = {
    "matmul": (torch.mm, lambda a, b: (a, b)),
    "matmul_transpose_b": (torch.mm, lambda a, b: (a, b.t())),
    "matmul_transpose_a": (torch.mm, lambda a, b: (a.t(), b)),
    "batch_matmul": (torch.bmm, lambda a, b: (a, b)),
    "batch_matmul_transpose_b": (torch.bmm, lambda a, b: (a, b.transpose(1, 2))),
}
# The same for steps with a third operand, a bias (mlircap-matmul-bias): torch.addmm.
_BIAS_OUT_VARIANTS = {
    "matmul": (torch.addmm, lambda a, b, c: (c, a, b)),
    "matmul_transpose_b": (torch.addmm, lambda a, b, c: (c, a, b.t())),
}


def out_variant(step: LibraryStep):
    """(torch function with out=, operands from the step's inputs) for `step`, or None."""
    return (_OUT_VARIANTS if len(step.ins) == 2 else _BIAS_OUT_VARIANTS).get(step.op)


# Convolutions cuDNN can write into the plan's buffer (aten.cudnn_convolution.out).
_CUDNN_OUT = ("conv2d_nchw_fchw", "conv2d_nhwc_fhwc", "conv2d_depthwise_nhwc_hwc")


def _channels_last_strides(t: torch.Tensor) -> bool:
    """torch's is_channels_last_strides_2d of a 4-d tensor (c10/core/MemoryFormat.h), which
    suggest_memory_format() follows: a size-1 dimension makes the strides ambiguous, and then
    the actual stride values decide."""
    sizes, strides = t.shape, t.stride()
    if strides[1] == 0:
        return False
    m = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < m or (d == 0 and m == strides[1]):
            return False
        m = strides[d] * sizes[d] if sizes[d] > 1 else strides[d]
    return True


def _cudnn_writes_channels_last(x: torch.Tensor, w: torch.Tensor) -> bool:
    """The memory format cudnn_convolution.out writes its result in, whatever the out
    tensor's strides (cudnn_conv_suggest_memory_format): channels-last when the input or
    the filter has channels-last strides, never for float64. A one-channel NHWC input and
    filter ((1, 6, 5, 1) as a channels-last NCHW view) have NCHW strides: cuDNN wrote an
    NCHW result into the plan's NHWC buffer (ESPCN's first convolution, 238 of 240
    elements wrong on the H200)."""
    if x.dtype == torch.float64 or w.dtype == torch.float64:
        return False
    return _channels_last_strides(x) or _channels_last_strides(w)


def _cudnn_benchmark() -> bool:
    flag = config.env("MLIRCAP_CUDNN_BENCHMARK")
    return torch.backends.cudnn.benchmark if flag is None else flag == "1"


def mark_layout(linalg_ir: str, channels_last: bool) -> str:
    """The module as the plan compilers take it: without channels_last it is marked
    (`mlircap.nchw_convs`) for mlircap-conv-channels-last to leave its convolutions
    NCHW. The mark is part of the IR, so of the compile cache's key."""
    if channels_last or ("linalg.conv_2d_nchw_fchw" not in linalg_ir and
                         "linalg.depthwise_conv_2d_nchw_chw" not in linalg_ir):
        return linalg_ir
    return mark_module(linalg_ir, "mlircap.nchw_convs")


def mark_round_once(linalg_ir: str) -> str:
    """The module as the CPU compilers take it: marked (`mlircap.round_once`) for
    mlircap-narrow-library-operands to keep bf16/f16 convolutions with a bias in f32,
    rounded once as torch's conv2d rounds them (stored narrow, they were rounded before
    and after the bias add: a unit in the last place off eager's). Part of the IR, so
    of the compile cache's key."""
    if "conv_2d" not in linalg_ir:
        return linalg_ir
    return mark_module(linalg_ir, "mlircap.round_once")


def mark_matmul_bias(linalg_ir: str) -> str:
    """The module as the plan compilers take it: marked (`mlircap.matmul_bias`) for
    mlircap-matmul-bias to hand a Linear's bias to its library matmul (torch.addmm, eager's
    call; a bf16 result stored bf16), unless MLIRCAP_MATMUL_BIAS=0. Part of the IR, so of
    the compile cache's key."""
    if "linalg.matmul" not in linalg_ir or config.env("MLIRCAP_MATMUL_BIAS") == "0":
        return linalg_ir
    return mark_module(linalg_ir, "mlircap.matmul_bias")


def plan_input_ir(linalg_ir: str, device: str) -> str:
    """The IR exactly as the launch-plan compiler of `device` ("cpu" | "cuda") takes it: the
    marks above (part of the compile cache's key) and, for the CPU, the `mlircap.conv_bias`
    mlircap_cpu_plan_compile adds itself. MLIRCAP_DUMP_DIR writes it (plan_input.mlir), so that
    `mlircap-opt plan_input.mlir --mlircap-fuse` shows the plan's own kernels."""
    if device == "cuda":
        return mark_matmul_bias(mark_layout(linalg_ir, config.env("MLIRCAP_GPU_CHANNELS_LAST") != "0"))
    marked = mark_round_once(mark_matmul_bias(mark_layout(linalg_ir, config.env("MLIRCAP_CPU_CHANNELS_LAST") == "1")))
    return mark_module(marked, "mlircap.conv_bias")


def mark_module(linalg_ir: str, attr: str) -> str:
    """`linalg_ir` with the unit attribute `attr` on its module."""
    m = _MODULE.search(linalg_ir)    # after any attribute aliases (#map = ...)
    if m is None:   # an implicit module: wrapped, its leading aliases left outside
        a = _ALIASES.match(linalg_ir).end()
        return linalg_ir[:a] + f"module attributes {{{attr}}} {{\n" + linalg_ir[a:] + "\n}\n"
    if m.group(1):
        return linalg_ir[:m.end()] + f"{attr}, " + linalg_ir[m.end():]
    return linalg_ir[:m.start()] + f"module attributes {{{attr}}} {{" + linalg_ir[m.end():]


_MODULE = re.compile(r"^module\s*(?:(attributes\s*\{)|\{)", re.M)
_ALIASES = re.compile(r"(?:\s*#[^\n]*\n)*")


def _host_input_ok(x, device: torch.device) -> bool:
    """A CPU tensor input of a graph compiled for the GPU: `x[torch.randperm(n)]` or
    `torch.randint(...)` made without device=, a 0-dim CPU tensor used as a scalar.
    The graph was traced with it on the CPU, so each op that takes it takes a CPU
    tensor there (indices, scalars) and reads only its values: the plan copies it to
    the GPU first (the graph's outputs are checked to be on the GPU when it compiles)."""
    return x.device.type == "cpu" and torch.device(device).type == "cuda"


class PlanExecutor:
    """Subclasses implement __call__; they run under torch.no_grad(): compiled
    graphs are inference graphs or aot_autograd forwards whose autograd is
    handled outside them, and library calls with out= reject grad mode."""

    def __init__(self, plan: Plan | dict, device: torch.device):
        plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
        self.plan = plan
        self.device = device
        self.values: tuple[Value, ...] = plan.values      # indexed by value id (ids are positions)
        self.inputs = sorted(plan.of_kind("input"), key=lambda v: v.index)
        self.buffers = plan.of_kind("buffer")
        self.views = plan.of_kind("view")
        self.constants = {}
        for v in plan.of_kind("constant"):
            dt = v.torch_dtype
            data = torch.tensor(v.data, dtype=torch.float64 if dt.is_floating_point else torch.int64)
            t = data.reshape(-1)[0].expand(v.shape) if v.splat else data.reshape(v.shape)
            self.constants[v.id] = t.to(dtype=dt, device=device).contiguous()
        for step in plan.library_steps:
            if step.op not in LIBRARY:
                raise PlanError(f"library op {step.op!r} has no runtime implementation")
        self.outputs = list(plan.outputs)
        self._const_outputs = {o for o in self.outputs if self.values[plan.base_of(o)].kind == "constant"}
        # output positions returned as copies (_outputs): those of constants, and
        # those copy_aliased_outputs finds sharing memory that eager's do not share
        self._copied = {i for i, o in enumerate(self.outputs) if o in self._const_outputs}
        self.kernel_steps = list(plan.kernels)
        self.n_kernels = len(self.kernel_steps)
        self.n_library = len(plan.library_steps)

    def _check_input(self, v: Value, x):
        if (x.device != self.device and not _host_input_ok(x, self.device)) or x.dtype != v.torch_dtype:
            raise PlanError(f"input {v.index}: expected {v.dtype} on {self.device}, "
                            f"got {x.dtype} on {x.device}")
        if tuple(x.shape) != tuple(v.shape):
            # kernels index with the plan's static sizes: another shape would read and
            # write past (or short of) the tensor (a data-dependent size, `where(m)`'s,
            # reaching a graph after a graph break that compiled it for one size)
            raise PlanError(f"input {v.index}: expected shape {list(v.shape)}, got {list(x.shape)}")

    def _prepare_inputs(self, args):
        ins = []
        for v, x in zip(self.inputs, args):
            self._check_input(v, x)
            if x.device != self.device:   # a CPU tensor beside GPU ones (_host_input_ok)
                x = x.to(self.device)
            ins.append(x if x.is_contiguous() else x.contiguous())
        return ins

    def _materialize(self, inputs, buffers=None):
        """Tensors for every value id (inputs given, buffers allocated)."""
        t = {}
        for v, x in zip(self.inputs, inputs):
            t[v.id] = x
        if buffers is None:
            buffers = {v.id: torch.empty(v.shape, dtype=v.torch_dtype, device=self.device) for v in self.buffers}
        t.update(buffers)
        t.update(self.constants)
        for v in self.views:
            self._view(v, t)
        return t

    def _base_of(self, vid: int) -> int:
        """The value a view `vid` is a view of; `vid` itself if not a view."""
        return self.plan.base_of(vid)

    def _outputs(self, t) -> list:
        """The graph's outputs from value tensors `t`. An output that is (a view
        of) a constant is copied: the constant is shared by every call and the
        caller may write to what it gets back."""
        copied = self._copied
        return [t[o].clone() if i in copied else t[o] for i, o in enumerate(self.outputs)]

    def copy_aliased_outputs(self, roots: list) -> set[int]:
        """Output positions to return as copies so that outputs share memory only
        where eager's do. `roots[i]`: what output i is (a view of) in eager, ("input",
        k) for the k-th graph input, another hashable for an intermediate (the same
        one for outputs that alias each other), None where unknown (a copy unless the
        plan gives it memory of its own). The plan returns a value once per use: a
        clone, `x * 1` or `y + 0` folds to the value it copies, so `return y,
        y.clone()` got one buffer twice and `x.clone()` the caller's input itself
        (an in-place op on one output then changed the other, or the input)."""
        owner: dict[int, object] = {}
        for i, o in enumerate(self.outputs):
            base = self._base_of(o)
            v = self.values[base]
            root = roots[i] if i < len(roots) else None
            if i in self._copied:
                continue
            if v.kind == "input":
                if root != ("input", v.index):
                    self._copied.add(i)
            elif base in owner:
                if root is None or owner[base] != root:
                    self._copied.add(i)
            else:
                owner[base] = root if root is not None else ("position", i)
        return self._copied

    def _view(self, v: Value, t):
        if v.id in t:
            return t[v.id]
        base = t[v.of]
        view = base.as_strided(v.shape, v.strides, base.storage_offset() + v.offset)
        t[v.id] = view
        return view

    def _run_library(self, step: LibraryStep, t):
        ins = [t[i] for i in step.ins]
        out = t[step.out]
        if not out.dtype.is_floating_point and out.dtype != ins[0].dtype:
            # Integer operands accumulating into a wider integer (torch._int_mm:
            # int8 x int8 -> int32): compute wide, never in the operands' type.
            # On CUDA (no integer GEMM for every shape) through float64, exact
            # for 8/16-bit operands.
            wide = torch.float64 if out.device.type == "cuda" else out.dtype
            out.copy_(LIBRARY[step.op]([x.to(wide) for x in ins], step))
            return
        if out.device.type == "cpu":   # (CUDA first tries cuBLAS's out_dtype below)
            ins = _widened(ins, out)
            if out.dtype in (torch.bfloat16, torch.float16) and all(x.dtype == out.dtype for x in ins):
                from ..partition import cpu_native_narrow_kernels

                if not cpu_native_narrow_kernels(out.dtype):   # float32 sums rounded once, as torch's
                    out.copy_(LIBRARY[step.op]([x.float() for x in ins], step))   # (runtime/cpu._emulated_narrow)
                    return
        variant = out_variant(step)
        if variant is not None and out.is_contiguous():
            op, operands = variant
            args = operands(*ins)
            a, b = args[-2:]
            if all(x.dtype == out.dtype for x in ins):
                op(*args, out=out)
                return
            if out.device.type == "cuda" and self._wide_out_ok and len(ins) == 2:
                # bf16/f16 operands accumulating into an f32 result (see
                # mlircap-narrow-library-operands): cuBLAS writes f32 directly
                # (mm.dtype_out; CUDA only).
                if self._wide_out_into:
                    try:
                        op(a, b, out_dtype=out.dtype, out=out)
                        return
                    except (RuntimeError, TypeError):
                        self._wide_out_into = False
                try:
                    out.copy_(op(a, b, out_dtype=out.dtype))
                    return
                except (RuntimeError, TypeError):
                    self._wide_out_ok = False
        ins = _widened(ins, out)
        depthwise = step.op == "conv2d_depthwise_nhwc_hwc"
        if step.op in _CUDNN_OUT and (self._cudnn_dw_out_ok if depthwise else self._cudnn_out_ok) \
                and out.dtype == ins[0].dtype and len(ins) == 2 \
                and out.device.type == "cuda" and out.is_contiguous() and torch.backends.cudnn.enabled:
            # cuDNN writes into the plan's buffer (F.conv2d has no out= form: its
            # result would be copied in); same flags as F.conv2d would use. NHWC
            # operands are passed as channels-last NCHW views.
            cudnn = torch.backends.cudnn
            x, w, y, groups = ins[0], ins[1], out, 1
            if step.op == "conv2d_nhwc_fhwc":
                x, w, y = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), y.permute(0, 3, 1, 2)
            elif depthwise:
                groups = x.shape[3]
                x, w, y = x.permute(0, 3, 1, 2), w.permute(2, 0, 1).unsqueeze(1), y.permute(0, 3, 1, 2)
            if step.op == "conv2d_nhwc_fhwc" and x.dtype != torch.float64 and not _cudnn_writes_channels_last(x, w):
                # An NCHW input and filter (a model's first convolution reads the caller's
                # NCHW image): cuDNN would write NCHW, so F.conv2d's result was copied into the
                # NHWC buffer through a transpose (ResNet-18's stem: 51 MB, and cuDNN's own
                # transposes around an NCHW call). A channels-last filter (a copy, which cuDNN
                # makes of any filter whose format differs from its input's) makes it write NHWC.
                w = w.contiguous(memory_format=torch.channels_last)
            if _cudnn_writes_channels_last(x, w) == (step.op != "conv2d_nchw_fchw"):
                try:
                    torch.ops.aten.cudnn_convolution.out(
                        x, w, step.padding or (0, 0), step.strides or (1, 1), step.dilations or (1, 1), groups,
                        _cudnn_benchmark(), cudnn.deterministic, cudnn.allow_tf32, out=y)
                    return
                except (RuntimeError, TypeError, NotImplementedError):
                    if depthwise:
                        PlanExecutor._cudnn_dw_out_ok = False
                    else:
                        PlanExecutor._cudnn_out_ok = False
        out.copy_(LIBRARY[step.op](ins, step))

    _cudnn_out_ok = True
    _cudnn_dw_out_ok = True
    _wide_out_ok = True
    _wide_out_into = True

    def describe_kernel(self, st: KernelStep) -> str:
        shapes = [list(self.values[a].shape) for a in st.value_args]
        return f"{st.name} [{st.strategy}] grid={st.grid[0]} out={shapes[-1] if shapes else []}"

    def describe_library(self, st: LibraryStep) -> str:
        return f"library {st.op} {[list(self.values[i].shape) for i in st.ins]} {self.values[st.out].dtype}"
