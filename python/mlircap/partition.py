"""Partitioning an aten graph into compiled parts and eager islands.

Some ops must not be compiled even when torch-mlir imports them:
* random ops draw from torch's generator, so `torch.manual_seed` works, two
  graphs never share a stream and results equal eager's;
* ops that index with a tensor computed from the graph's inputs (embedding,
  gather, index, index_put, scatter, nll_loss targets, ...) raise IndexError in
  eager when an index is out of range: compiled code would read or write out
  of bounds. Indices that depend on no input are constants, already checked by
  the eager recording run on the same shapes, so those ops stay compiled;
* dtypes the compiler does not handle (complex, quantized; uint8 except in the ops
  widen.py computes as int32);
* fused attention kernels (SDPA's flash/efficient/cudnn variants on CUDA), FFTs
  and LAPACK factorizations/solvers: library calls through torch, as matmul and conv are;
* ops torch-mlir rejected (`forced`), so one unsupported op no longer sends
  the whole graph to eager;
* ops whose eager kernels round in a way compiled code does not reproduce
  (`EAGER_NUMERICS`: integer and low-precision linspace and low-precision
  logspace where ranges.py does not follow eager's kernel: integer linspace of
  tensor endpoints, whose CPU kernel truncates a fused multiply-add in double, and CUDA;
  low-precision upsampling and grid sampling; arange with float arguments and an integer
  dtype, whose lowering crashed torch-mlir);
* shape-changing ops on or producing tensors without elements: nothing to
  compute, and torch-mlir's lowering divides by their zero sizes.

Such ops run through torch as *eager islands*; everything else is grouped into
as few compiled parts as the data dependencies allow. Parts run in stage
order C0, E0, C1, E1, ...: a compiled node that reads an eager result moves
to the next stage, an eager node that reads a compiled result runs after that
compiled part. Random ops keep their program order (one RNG stream).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from .constfold import CONST_LIMIT, constant_node, fill_node, is_uniform, real_like
from .fxutil import leaves as _leaves
from .fxutil import op_name
from .complex_pairs import BOUNDARY, FFT_OPS
from . import unsigned_bits
from .widen import uint8_computable
from .target import device_type

aten = torch.ops.aten

# Op name -> positions of its index-tensor arguments.
_INDEX_ARGS: dict[str, tuple[int, ...]] = {
    "aten::embedding": (1,), "aten::embedding_bag": (1, 2), "aten::_embedding_bag": (1, 2),
    "aten::_embedding_bag_forward_only": (1, 2),
    "aten::gather": (2,), "aten::index_select": (2,), "aten::take": (1,), "aten::take_along_dim": (1,),
    "aten::index": (1,), "aten::index_put": (1,), "aten::index_put_": (1,),
    "aten::_unsafe_index": (1,), "aten::_unsafe_index_put": (1,), "aten::_index_put_impl": (1,),
    "aten::scatter": (2,), "aten::scatter_add": (2,), "aten::scatter_reduce": (2,),
    "aten::index_add": (2,), "aten::index_copy": (2,), "aten::index_fill": (2,), "aten::index_reduce": (2,),
    "aten::nll_loss_forward": (1,), "aten::nll_loss2d_forward": (1,), "aten::nll_loss": (1,),
    "aten::nll_loss_nd": (1,), "aten::multi_margin_loss": (1,), "aten::multilabel_margin_loss_forward": (1,),
    "aten::max_unpool2d": (1,), "aten::max_unpool3d": (1,),
    "aten::embedding_dense_backward": (1,), "aten::nll_loss_backward": (2,),
}

# Random ops whose tensor argument only gives a shape: rewritten to the
# factory form so they depend on nothing and join the first eager island.
_LIKE_FACTORY = {"aten::rand_like": aten.rand.default, "aten::randn_like": aten.randn.default}

# Fused attention kernels (CUDA): library calls through torch, like matmul.
_LIBRARY_OPS = {"aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
                "aten::_efficient_attention_forward", "aten::_scaled_dot_product_fused_attention_overrideable",
                "aten::_scaled_dot_product_flash_attention_for_cpu",
                # their gradients in backward graphs (aot_autograd keeps them whole), as eager runs
                # them: torch-mlir's convolution_backward (a transposed convolution of the padded,
                # dilated gradient) made CPU plans the builder rejects ('tensor.insert_slice'), and
                # each one's probe found no op to blame, so the backward graph fell back whole
                "aten::convolution_backward", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                "aten::_scaled_dot_product_flash_attention_backward",
                "aten::_scaled_dot_product_efficient_attention_backward",
                "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_flash_attention_backward",
                "aten::_efficient_attention_backward",
                # and pooling's: avg_pool2d_backward with padding (PoolFormer's 3x3 pooling, Funnel's
                # strided mean pooling) left torch-to-linalg a 'torch.constant.int' it rejected (no op
                # named, the probes' limit spent before it), and the whole backward ran as it was
                "aten::avg_pool2d_backward", "aten::avg_pool3d_backward",
                # FFTs (pocketfft/MKL, cuFFT) on complex values as pairs of reals (complex_pairs.py)
                *FFT_OPS,
                # LAPACK (cuSOLVER/MAGMA) factorizations and solvers, as inductor calls them
                *(f"aten::{n}" for n in (
                    "_linalg_svd", "linalg_cholesky_ex", "_linalg_slogdet", "_linalg_det", "_linalg_eigh",
                    "linalg_eig", "linalg_qr", "linalg_lu_factor_ex", "linalg_lu", "linalg_lu_solve",
                    "_linalg_solve_ex", "linalg_solve_triangular", "triangular_solve", "linalg_inv_ex",
                    "cholesky_inverse", "cholesky_solve", "linalg_householder_product", "geqrf", "ormqr",
                    "linalg_ldl_factor_ex", "linalg_ldl_solve", "lu_unpack"))}

# CPU: ops whose compiled form runs slower than eager's vectorized kernel: library
# calls through torch there, kept whole by the decomposition table
# (MLIRCAP_CPU_LIBRARY_OPS=0 compiles them). log_softmax alone, 1 thread, float32:
# 256x1000 over the last dim 0.80x eager compiled against 0.97x as a library call,
# 8x10x16x16 over dim 1 0.41x against 0.78x. softmax and group_norm compile since
# mlircap-reduction-loops collapses elementwise loops and hoists broadcast rows
# (alone: softmax 0.88-1.6x eager, group_norm 0.8-0.9x), and an island costs more
# than that in a model: it splits the graph in two plans plus a Python call
# (softmax in BERT, 2 layers: 1.65x -> 1.84x eager; nn.TransformerEncoderLayer 0.90x
# -> 0.99x; UNet's GroupNorm 0.99x in 15 graphs -> 1.07x in one).
# erfinv and erfc (special_erf.py's float64 steps reproduce eager's MKL values): 1M float32,
# 1 thread, loaded Zen 3, `op(x) * 2 + 1`: erfinv 90.7 ms compiled against eager's 7.5 (11.3 as a
# library call), erfc 49.3 against 7.2 (8.0).
# max_pool2d_with_indices_backward: the compiled form (maxpool.max_pool_backward, a layout of the
# gradients per kernel position, summed) writes and reads an input-sized tensor per kernel
# position, where eager's kernel adds each gradient once: bench/heldout3.py --train squeezenet
# (3x3 ceil_mode pools) 0.48x -> 0.82x eager, inception 0.84x -> 0.95x.
CPU_LIBRARY_OPS = {"aten::_log_softmax", "aten::erfinv", "aten::erfc", "aten::max_pool2d_with_indices_backward"}


def cpu_library(name: str, device, dtype=None) -> bool:
    """Op `name` on `device` (its result of `dtype`) runs as a CPU library call
    (CPU_LIBRARY_OPS, CPU_LOW_PRECISION_LIBRARY_OPS)."""
    from . import config

    ops = CPU_LIBRARY_OPS | (CPU_LOW_PRECISION_LIBRARY_OPS if dtype in (torch.bfloat16, torch.float16) else set())
    return name in ops and device is not None and device_type(device) == "cpu" \
        and config.env_flag("MLIRCAP_CPU_LIBRARY_OPS")


# CPU ops whose bfloat16/float16 kernels accumulate in the dtype itself, every partial sum
# rounded: nll_loss2d's cascade sum in scalar_t (ATen's LossNLL2d.cpp), and nll_loss's over
# a batch of rows (LossNLL.cpp's nll_loss_out_frame, cross_entropy's second half). The compiled
# float32 sum is closer to the exact value but not to eager's (OpInfo nll_loss bfloat16/float16
# #33, #34, #53: up to 3% apart; bench/heldout3.py kd_loss bf16: cross_entropy of 8 rows one
# ulp off, its loss 5.6e-2 of scale): they run through torch, eager's own kernel and bits.
CPU_LOW_PRECISION_LIBRARY_OPS = {"aten::nll_loss2d_forward", "aten::nll_loss_forward"}


# CPU: bfloat16/float16 products with a bias (addmm: linear's; convolutions, 1-D and 2-D)
# compile as eager rounds them: the float32 product of the converted operands plus the bias,
# rounded once (frontend._product_plus_bias_rounded_once, _cpu_convolution; a depthwise
# convolution's float32 result is kept wide for its bias add: mlircap-narrow-library-operands).
# That runs torch's float32 kernel on operands converted every call, 2.2-2.9x the time of
# eager's bfloat16 oneDNN kernel (1 thread, Zen 4: addmm 128x256x1024 883 vs 389 us,
# 12544x384x96 15.4 vs 5.4 ms; depthwise 7x7 4x96x28x28 3.6 vs 0.94 ms), which computes the
# same thing (float32 sums, the bias added before its one rounding). From
# CPU_NARROW_LIBRARY_MACS multiply-adds such an op stays whole and runs through torch,
# eager's own kernel and bits, as a library call; smaller ones, where the island's call
# costs more than the conversions, compile (MLIRCAP_CPU_LIBRARY_OPS=0: all), as do all
# where torch has no native kernel for the dtype on this host (cpu_native_narrow_kernels).
CPU_NARROW_LIBRARY_MACS = 1 << 20


def cpu_native_narrow_kernels(dtype: torch.dtype) -> bool:
    """torch's CPU products in `dtype` (bfloat16/float16) run oneDNN's native kernels on
    this host (AVX512-BF16/AMX, AVX512-FP16: mkldnn's device checks, which ATen's addmm and
    convolution consult). Without them eager converts in scalar loops: on a Zen 3 (AVX2),
    1 thread, a bf16 linear 128x256x1024 took 8.3 ms against 0.94 ms for the float32
    product of the converted operands, a 3x3 conv 32->32 at 32x32 17.4 ms against 0.50:
    there the compiled form is the fast one and nothing runs through torch."""
    check = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}.get(dtype)
    if check is None or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(getattr(torch.ops.mkldnn, check)())
    except (AttributeError, RuntimeError):
        return False


def cpu_narrow_library(name: str, args) -> bool:
    """`name(*args)` (tensor arguments as tensors or their metadata) is a bfloat16/float16
    addmm or convolution with a bias on the CPU large enough to run through torch
    (CPU_NARROW_LIBRARY_MACS)."""
    from . import config

    if name not in ("aten::addmm", "aten::convolution") or len(args) < 3:
        return False
    a, b, bias = (args[1], args[2], args[0]) if name == "aten::addmm" else args[:3]
    if not all(isinstance(t, torch.Tensor) for t in (a, b, bias)) or device_type(a) != "cpu" or \
            a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype or bias.dtype != a.dtype:
        return False
    if name == "aten::addmm":
        if a.dim() != 2 or b.dim() != 2:
            return False
        macs = a.shape[0] * a.shape[1] * b.shape[1]
    else:
        x, w = a, b
        if len(args) < 9 or args[6] or w.dim() not in (3, 4) or x.dim() != w.dim():
            return False   # transposed
        # a list of one number stands for every spatial dim (ATen's expand_param_if_needed:
        # conv2d(padding='valid') reaches aten.convolution with padding [0])
        stride, padding, dilation = ([int(p[0])] * (w.dim() - 2) if len(p) == 1 else list(p)
                                     for p in (args[3], args[4], args[5]))
        out = x.shape[0] * w.shape[0]
        for i, k in enumerate(w.shape[2:]):
            out *= (x.shape[2 + i] + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1
        macs = out * w[0].numel()
    return macs >= CPU_NARROW_LIBRARY_MACS and config.env_flag("MLIRCAP_CPU_LIBRARY_OPS") and \
        cpu_native_narrow_kernels(a.dtype)


# Ops whose eager kernels round in ways no decomposition reproduces: the op
# name -> the output dtypes in which the compiled decomposition matches eager
# (to the dtype's tolerance); in any other dtype the op stays whole and runs
# through torch (unless a decomposition tried first follows eager: ranges.py for
# linspace/logspace). linspace truncates the endpoints to the dtype and steps with
# a fused multiply-add in double on the CPU, logspace rounds them to bfloat16/float16; the
# upsampling kernels round low-precision intermediates between their separable
# passes.
_FLOATS = (torch.float32, torch.float64)
_INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_LOW = (torch.bfloat16, torch.float16)
EAGER_NUMERICS: dict[str, tuple[torch.dtype, ...]] = {
    "aten::linspace": _FLOATS, "aten::logspace": _FLOATS + _INTS,
    "aten::upsample_linear1d": _FLOATS, "aten::upsample_bilinear2d": _FLOATS,
    "aten::upsample_trilinear3d": _FLOATS, "aten::upsample_bicubic2d": _FLOATS,
    "aten::_upsample_bilinear2d_aa": _FLOATS, "aten::_upsample_bicubic2d_aa": _FLOATS,
    # grid sampling: eager computes bfloat16/float16 in float32 and rounds once;
    # its decomposition rounds each of its many steps (bf16: 125/150 elements off)
    "aten::grid_sampler_2d": _FLOATS, "aten::grid_sampler_3d": _FLOATS,
    # bilinear's _trilinear: eager rounds its bfloat16 partial products its own way
    # (OpInfo nn.functional.bilinear bf16: 11/48 elements off, up to 0.25); integers are
    # exact in any order (wrapping sums of products)
    "aten::_trilinear": _FLOATS + _INTS,
    # bfloat16/float16 kernels that round intermediates (logit's x/(1-x), cross's
    # products): computing them in float32 and rounding once (opmath.py) is more
    # accurate but differs from eager's
    "aten::logit": _FLOATS, "aten::linalg_cross": _FLOATS + _INTS, "aten::cross": _FLOATS + _INTS,
    # and rounding divisions (div only with a rounding_mode): floor / trunc division follows
    # eager's two bf16/f16 kernels (frontend._low_precision_division); fmod / remainder are
    # exact, rerun eagerly where |a / b| overflows (frontend._remainder_overflow_checked)
    "aten::floor_divide": _FLOATS + _INTS + _LOW, "aten::fmod": _FLOATS + _INTS + _LOW,
    "aten::remainder": _FLOATS + _INTS + _LOW, "aten::div": _FLOATS + _INTS + _LOW,
    # bfloat16/float16 matmul + bias on the CPU: eager adds the bias to the float32
    # product and rounds once; the compiled plan rounds the library product, then
    # adds (1-ulp differences, amplified by a following cross-entropy: OpInfo
    # linear_cross_entropy bf16, 8 of 700 samples wrong by up to 0.06)
    # (baddbmm is left compiled: hand-written attention's baddbmm form fuses, attention.py)
    "aten::addmm": _FLOATS + _INTS, "aten::addmv": _FLOATS + _INTS,
}
_FACTORIES = ("aten::linspace", "aten::logspace")

# Ops whose torch-mlir lowering crashes (the compile worker dies: a contained
# fallback, but a worker restart each time) outside these dtypes: they run
# through torch without reaching torch-mlir. max_pool3d of integers: SIGSEGV.
_LOWERS_ONLY: dict[str, tuple[torch.dtype, ...]] = {
    "aten::max_pool3d": (torch.float32, torch.float64, torch.float16, torch.bfloat16),
    "aten::max_pool3d_with_indices": (torch.float32, torch.float64, torch.float16, torch.bfloat16),
    # int8 matrix products: SIGSEGV in torch-to-linalg
    **{op: _FLOATS + (torch.float16, torch.bfloat16, torch.bool, torch.uint8, torch.int16, torch.int32, torch.int64)
       for op in ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::mv",
                  "aten::addmv", "aten::dot", "aten::vdot", "aten::addbmm")},
}

# Eager islands that are part of the design, not a limitation to report
# ("empty": a shape-changing op on a tensor without elements computes nothing,
# and torch-mlir's static shape arithmetic divides by its zero sizes: the compile
# worker died of SIGFPE on stack/tile/unfold/group_norm/max_pool of empty
# tensors; pointwise ops, fills and factories of empty tensors compile).
BY_DESIGN = ("random", "index", "library", "numerics", "empty", "host")
# A CPU tensor made in a graph that runs on the GPU (BEiT's relative position index built with
# torch.arange on the CPU, then indexing a CUDA table): those ops run through torch, where eager
# runs them; the rest of the graph stays compiled (before, the CPU output made the whole graph
# run eagerly: 'graph output view_22 is on cpu, the graph is compiled for cuda').
_HOST = "host"
# Effect tokens are empty tensors that order side effects (with_effects, a
# higher-order op, is not an OpOverload): not an empty computation.
_TOKEN_OPS = ("prims::_make_token", "prims::_sink_tokens")

SUPPORTED_DTYPES = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.bool}


# EAGER_NUMERICS entries that differ on CUDA: eager's integer logspace there
# rounds its own way (H200 OpInfo sweep: 48 int16/int32/int64 samples one off).
_CUDA_EAGER_NUMERICS: dict[str, tuple[torch.dtype, ...]] = {
    "aten::logspace": _FLOATS,
    # the GPU keeps compiling low-precision matmul + bias (unchanged; not re-measured here)
    **{op: _FLOATS + _INTS + (torch.bfloat16, torch.float16) for op in ("aten::addmm", "aten::addmv")},
    # bf16/f16 rounding divisions follow eager's CPU kernels only (frontend._low_precision_division)
    **{op: _FLOATS + _INTS for op in ("aten::floor_divide", "aten::fmod", "aten::remainder", "aten::div")},
}


def _exact_dtypes(name: str, kwargs, device=None) -> tuple[torch.dtype, ...] | None:
    """EAGER_NUMERICS' entry for op `name` called with `kwargs` (div only with a
    rounding_mode) on `device`, or None."""
    if name == "aten::div" and kwargs.get("rounding_mode") is None:
        return None
    if device is not None and device_type(device) == "cuda" and name in _CUDA_EAGER_NUMERICS:
        return _CUDA_EAGER_NUMERICS[name]
    return EAGER_NUMERICS.get(name)


def eager_numerics(target, args, kwargs) -> bool:
    """`target(*args, **kwargs)` must run through torch to give eager's values
    (EAGER_NUMERICS): its result's dtype is the dtype= argument of a factory,
    else its input's; a pointwise op of two operands computes in their promoted dtype
    (a float16 tensor // a float32 one runs eager's float32 kernel), as the partition
    judges the node by its result's dtype."""
    name = op_name(target)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name in _FACTORIES or not args or not isinstance(args[0], torch.Tensor):
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        device = kwargs.get("device") or (tensors[0].device if tensors else torch.get_default_device())
    else:
        dtype, device = args[0].dtype, args[0].device
        if len(args) > 1 and isinstance(args[1], (torch.Tensor, int, float)) and (
                torch.Tag.pointwise in getattr(target, "tags", ()) or name == "aten::floor_divide"):
            dtype = torch.result_type(args[0], args[1])
    exact = _exact_dtypes(name, kwargs, device)
    return exact is not None and dtype not in exact


def _reshapes_empty(node: fx.Node, name: str, ins: list, vals: list) -> bool:
    """A shape-changing op (not pointwise, not a fill or factory) on or making a
    tensor without elements: torch-mlir's lowering divides by its zero sizes."""
    target = node.target
    return (isinstance(target, torch._ops.OpOverload) and bool(ins) and name not in _TOKEN_OPS
            and not name.endswith("_like") and torch.Tag.pointwise not in target.tags
            and any(v.numel() == 0 for v in vals))


def is_random(node: fx.Node) -> bool:
    """`node` draws from torch's generator. The fused attention kernels are
    tagged random for their dropout: without it they are deterministic."""
    if node.op != "call_function" or torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    return op_name(node.target) not in _LIBRARY_OPS or _argument(node, "dropout_p", 0.0) != 0


def _plan_convolution(node: fx.Node) -> bool:
    """A convolution the launch plans run as their own library step (2-D, not
    transposed, ungrouped or depthwise with one filter per channel: cuDNN / oneDNN
    through torch, with the epilogue fused). Any other (1-D, 3-D, grouped, depthwise
    with a channel multiplier, transposed) runs through torch as well, but as an
    island: compiled as loops, single thread, they ran 5-9x slower than eager
    (conv3d 2x4x16^3 11.8 vs 1.25 ms, conv1d 7.1 vs 0.84, depthwise 3x3 11.9 vs 2.3)."""
    w = node.args[1].meta.get("val") if len(node.args) > 1 and isinstance(node.args[1], fx.Node) else None
    if not isinstance(w, torch.Tensor) or w.dim() != 4 or _argument(node, "transposed", False):
        return False
    groups = _argument(node, "groups", 1)
    # depthwise (torch-mlir: linalg.depthwise_conv_2d_nchw_chw, the plan's conv2d_depthwise_nchw_chw)
    return groups == 1 or (groups == w.shape[0] and w.shape[1] == 1)


def _argument(node: fx.Node, name: str, default):
    """The value of the argument called `name` of the call `node`."""
    schema = getattr(node.target, "_schema", None)
    for i, a in enumerate(schema.arguments if schema is not None else ()):
        if a.name == name:
            if i < len(node.args) and not a.kwarg_only:
                return node.args[i]
            return node.kwargs.get(name, default)
    return default


def _library_error_check(node: fx.Node) -> bool:
    """`with_effects(token, aten._linalg_check_errors, info, ...)`: the check that raises
    eager's error (a singular matrix, ...) from a LAPACK call's info result, which torch
    orders as a side effect (aot_autograd wraps it in the with_effects higher-order op,
    which the FX importer cannot take). It belongs with the library call it checks:
    linalg.solve, cholesky, lu_factor, inv ran it as an 'unsupported' island."""
    return node.target is torch.ops.higher_order.with_effects and len(node.args) >= 2 and \
        node.args[1] is aten._linalg_check_errors.default


# A CPU cat compiles to one generic over its result that reads every piece at clamped
# indices and selects the one in bounds (mlircap-tensor-to-generic): K loads an element.
# From CPU_CAT_LIBRARY_PIECES pieces and CPU_CAT_LIBRARY_LOADS such loads it runs through
# torch (a copy per piece), its pieces' producers compiled around it. 1 thread, Zen 4,
# cat(x * 2 for K pieces), last dim: [256, 64] x 4 pieces 67 us against eager's 27,
# x 21 2.6 ms against 0.27; NeRF's positional encoding (21 pieces of [64, 16, 3]) 730 us
# against 240. Few or small pieces stay compiled, where fusing their producers wins
# ([1024, 3] x 8: 2.4x eager).
CPU_CAT_LIBRARY_PIECES = 4
CPU_CAT_LIBRARY_LOADS = 1 << 18


def _many_piece_cpu_cat(node: fx.Node) -> bool:
    from . import config

    pieces = node.args[0] if node.args else ()
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or device_type(out) != "cpu" or not isinstance(pieces, (list, tuple)):
        return False
    k = len(pieces)
    return k >= CPU_CAT_LIBRARY_PIECES and out.numel() * k >= CPU_CAT_LIBRARY_LOADS and \
        config.env_flag("MLIRCAP_CPU_LIBRARY_OPS")


def _eager_rejects(node: fx.Node, name: str) -> bool:
    """Whether eager's kernel raises on `node`'s operand dtypes, whatever the values: sub /
    rsub with a bool operand ("Subtraction, the `-` operator, with a bool tensor is not
    supported"), neg of a bool. Fake tensors do not check it, so a graph can hold one:
    aot_autograd's backward of pow(x, mask) computes `mask - 1` (pow_backward_self), and the
    compiled backward returned a gradient where eager's raised (--grad seed 657). Through
    torch it raises as eager's."""
    if name not in ("aten::sub", "aten::rsub", "aten::neg"):
        return False
    ops = node.args[:1] if name == "aten::neg" else node.args[:2]
    return any(isinstance(a, bool) or (isinstance(a, fx.Node) and isinstance(v := a.meta.get("val"), torch.Tensor)
                                       and v.dtype == torch.bool) for a in ops)


def _host_outputs(gm: fx.GraphModule) -> set[fx.Node]:
    """In a graph that runs on the GPU, the ops making its CPU outputs and the CPU tensors they
    are made from (_HOST). A CPU tensor that only feeds GPU ops (`x * torch.tensor(0.5)`) stays
    in the compiled code (a constant there)."""
    def on_host(n):
        return isinstance(n, fx.Node) and n.op == "call_function" and \
            any(v.device.type == "cpu" for v in _leaves(n.meta.get("val"), torch.Tensor))

    if all(v.device.type == "cpu" for n in gm.graph.nodes for v in _leaves(n.meta.get("val"), torch.Tensor)):
        return set()
    out = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    todo = [n for n in _leaves(out.args, fx.Node) if on_host(n)] if out is not None else []
    host: set[fx.Node] = set()
    while todo:
        n = todo.pop()
        if n not in host:
            host.add(n)
            todo += [d for d in n.all_input_nodes if on_host(d)]
    return host


def _eager_reason(node: fx.Node, from_input: set[fx.Node]) -> str | None:
    """Why `node` must run through torch, or None."""
    if node.meta.get(BOUNDARY):   # a pair viewed as complex for a library call, or back
        return _VIEW_FOR_ISLAND
    if is_random(node) or node.meta.get(_RANDOM_LAYOUT):
        return "random"
    name = op_name(node.target)
    if _eager_rejects(node, name):
        return "eager raises (operand dtypes)"
    if name in _LIBRARY_OPS or _library_error_check(node):
        return "library"
    out = node.meta.get("val")
    first = next(iter(_leaves(out, torch.Tensor)), None)
    if first is not None and cpu_library(name, first.device, first.dtype):
        return "library"
    if name in ("aten::addmm", "aten::convolution") and cpu_narrow_library(name, [
            a.meta.get("val") if isinstance(a, fx.Node) else a for a in node.args]):
        return "library"
    if name == "aten::convolution" and not _plan_convolution(node):
        return "library"
    if name == "aten::cat" and _many_piece_cpu_cat(node):
        return "library"
    if name == "aten::cumsum":   # too long for frontend's masked sum: torch's scan
        return "library"
    exact = _exact_dtypes(name, node.kwargs, first.device if first is not None else None)
    if exact is not None and first is not None and first.dtype not in exact:
        return "numerics"   # kept whole by frontend.decomposition_table: eager_numerics
    if name in _LOWERS_ONLY and first is not None and first.dtype not in _LOWERS_ONLY[name]:
        return f"dtype {str(first.dtype).replace('torch.', '')} (torch-mlir's lowering crashes)"
    for pos in _INDEX_ARGS.get(name, ()):
        if pos < len(node.args) and any(n in from_input for n in _leaves(node.args[pos], fx.Node)) \
                and not node.meta.get("mlircap_bounds_checked"):   # bounds.py clamps and checks
            if any(isinstance(v := n.meta.get("val"), torch.Tensor) and v.dtype in (torch.bool, torch.uint8)
                   for n in _leaves(node.args[pos], fx.Node)):
                # `t[mask] = v`: no index to check, nothing compiles it (bounds.py, scatter.py):
                # not by design, reported (strict=True raises)
                return "boolean mask index"
            return "index"
    ins = []
    for a in _leaves((node.args, tuple(node.kwargs.values())), fx.Node):
        ins += list(_leaves(a.meta.get("val"), torch.Tensor))
    vals = list(_leaves(node.meta.get("val"), torch.Tensor)) + ins
    if _reshapes_empty(node, name, ins, vals):
        return "empty"
    if name == "aten::arange" and isinstance(out, torch.Tensor) and not out.is_floating_point() and any(
            isinstance(a, float) for a in _leaves((node.args, tuple(node.kwargs.values())), float)):
        return "numerics"   # eager truncates a float start/step to the integer type
    if name == "aten::arange" and isinstance(out, torch.Tensor) and out.is_floating_point() and \
            not _arange_exact(node, out.dtype):
        return "numerics"   # eager's kernel rounds its own way (ranges.arange folds smaller ones)
    for v in vals:
        if v.layout != torch.strided:   # sparse: torch-mlir's importer cannot even type it
            return f"layout {str(v.layout).replace('torch.', '')}"
        if v.dtype == torch.uint8 and uint8_computable(node):
            continue   # computed as int32 and wrapped (widen.py)
        if v.dtype in unsigned_bits.SIGNED and unsigned_bits.moves_bits(node):
            continue   # bits held as the signed dtype of their width (unsigned_bits.py)
        if v.dtype not in SUPPORTED_DTYPES:
            return f"dtype {str(v.dtype).replace('torch.', '')}"
    return None


def _arange_exact(node: fx.Node, dtype) -> bool:
    """ranges.arange_exact of an aten.arange node's numbers (start, end, step)."""
    from .ranges import arange_exact

    args = list(node.args)
    if node.target is torch.ops.aten.arange.default:
        args = [0, args[0] if args else node.kwargs.get("end"), 1]
    else:   # .start / .start_step: step 1 where not given
        args = args[:3] + [node.kwargs.get("step", 1)] if len(args) == 2 else args[:3]
    return all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args) and arange_exact(args, dtype)


# The reason of a view that moved into the eager islands reading it (not reported:
# a view in an island computes nothing).
_VIEW_FOR_ISLAND = "view read by eager islands"


@dataclass
class Part:
    eager: bool
    stage: int
    nodes: list[fx.Node] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)   # node name -> why eager
    views: bool = False     # views of its inputs only: no launch plan (backend.compile_views)


# An empty_strided that gives a random op eager's layout (rewrite_random_likes): part of its island.
_RANDOM_LAYOUT = "mlircap_random_layout"


def rewrite_random_likes(gm: fx.GraphModule) -> None:
    """rand_like(x) -> rand(shape of x): the value of x is not read. Where x's layout is not
    contiguous (transposed, channels_last), eager's rand_like draws into a tensor laid out as
    x (empty_like keeps the layout): in memory order, and randn one number at a time where a
    contiguous result takes the vectorized path. There it becomes rand_like of an
    empty_strided tensor of that layout, which draws as eager does."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        factory = _LIKE_FACTORY.get(op_name(node.target))
        val = node.meta.get("val")
        if factory is None or not isinstance(val, torch.Tensor):
            continue
        opts = {"dtype": val.dtype, "device": val.device}
        with gm.graph.inserting_before(node):
            if val.is_contiguous():
                new = gm.graph.call_function(factory, (list(val.shape),), opts)
            else:
                like = gm.graph.call_function(aten.empty_strided.default,
                                              (list(val.shape), list(val.stride())), opts)
                like.meta = {"val": val, _RANDOM_LAYOUT: True}   # runs in the random op's island
                if "tensor_meta" in node.meta:
                    like.meta["tensor_meta"] = node.meta["tensor_meta"]
                new = gm.graph.call_function(node.target, (like,), {})
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
    gm.graph.lint()


def _fold(node: fx.Node, vals: list) -> list | None:
    """The result tensors of `node` run twice on real empty inputs, or None when torch
    rejects it, the runs disagree or a result is a tensor constant_node cannot hold."""
    try:
        results = []
        for _ in range(2):
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: real_like(n.meta["val"]))
            out = node.target(*args, **kwargs)
            results.append([out] if isinstance(out, torch.Tensor) else list(out))
    except Exception:  # noqa: BLE001 - torch rejects it: leave the node to the partitioner
        return None
    first, second = results
    if len(first) != len(vals) or not all(
            isinstance(a, torch.Tensor) and a.shape == v.shape and a.dtype == v.dtype
            and torch.equal(torch.nan_to_num(a.cpu().double()), torch.nan_to_num(b.cpu().double()))
            and torch.equal(a.isnan().cpu(), b.isnan().cpu())
            for a, b, v in zip(first, second, vals)):
        return None
    for a in first:
        flat = a.detach().cpu().reshape(-1)
        if not is_uniform(flat) and flat.numel() > CONST_LIMIT:
            return None
    return [a.detach() for a in first]


def _fold_empty_inputs(gm: fx.GraphModule, node: fx.Node) -> bool:
    """An op whose tensor inputs all have no elements computes a result that depends on
    their shapes alone (a norm or sum over nothing, a product with an empty inner
    dim, the info of a 0x0 inverse): torch computes it once here, on real empty
    tensors, and the node becomes a fill of that value (or, for a small result that
    is not one repeated value, a tensor constant), instead of an eager island for
    torch-mlir's zero-size arithmetic (see _reshapes_empty). Only deterministic,
    non-mutating ops on strided real tensors; the result is computed twice and kept
    only when both runs agree."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    name = op_name(node.target)
    if "empty" in name or name in _TOKEN_OPS or torch.Tag.nondeterministic_bitwise in node.target.tags:
        return False
    ins = [a.meta.get("val") for a in node.all_input_nodes]
    if not ins or not all(isinstance(v, torch.Tensor) and v.numel() == 0 and v.layout == torch.strided
                          and not v.is_complex() for v in ins):
        return False
    val = node.meta.get("val")
    vals = [val] if isinstance(val, torch.Tensor) else list(val) if isinstance(val, (tuple, list)) else []
    if not vals or not all(isinstance(v, torch.Tensor) and v.layout == torch.strided and not v.is_complex()
                           for v in vals):
        return False
    getitems = [u for u in node.users if u.target is operator.getitem]
    if not isinstance(val, torch.Tensor) and len(getitems) != len(node.users):
        return False   # the tuple itself is used
    with unset_fake_temporarily():
        consts = _fold(node, vals)
    if consts is None:
        return False
    users = [node] if isinstance(val, torch.Tensor) else getitems
    for u in users:
        k = 0 if u is node else u.args[1]
        with gm.graph.inserting_before(node):
            new = constant_node(gm, vals[k], consts[k], f"_mlircap_folded_{node.name}_{k}")
        new.meta = dict(u.meta)
        u.replace_all_uses_with(new)
        if u is not node:
            gm.graph.erase_node(u)
    if not node.users:
        gm.graph.erase_node(node)
    return True


def _cat_without_empty_inputs(node: fx.Node) -> bool:
    """aten.cat of some tensors with no elements and some with: eager skips the empty ones
    (also a legacy 1-D (0,) beside tensors of any rank), so the cat of the others is the same
    tensor, and compiles (an empty input made it an 'empty' island: torch-mlir's zero-size
    arithmetic, see _reshapes_empty). Only where every kept input already has the result's
    dtype (eager promotes across the empty ones too)."""
    if node.target is not torch.ops.aten.cat.default or not isinstance(node.args[0], (list, tuple)):
        return False
    out = node.meta.get("val")
    tensors = node.args[0]
    vals = [t.meta.get("val") if isinstance(t, fx.Node) else None for t in tensors]
    if not isinstance(out, torch.Tensor) or out.numel() == 0 or \
            not all(isinstance(v, torch.Tensor) and v.layout == torch.strided for v in vals):
        return False
    kept = [t for t, v in zip(tensors, vals) if v.numel() != 0]
    if len(kept) == len(tensors) or not kept or \
            not all(v.dtype == out.dtype for v in vals if v.numel() != 0):
        return False
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    node.args = (list(kept), dim)
    node.kwargs = {}
    return True


def _as_strided_of_scalar(gm: fx.GraphModule, node: fx.Node) -> bool:
    """aten.as_strided of a 0-d tensor that reads only its one element (at its own storage
    offset, every dim of size 1 or stride 0) is that element expanded: torch-mlir's
    lowering of as_strided of a rank-0 tensor crashed the compile worker (SIGSEGV/SIGABRT:
    OpInfo resize_ of a 0-d tensor to (1, 1, 1)), also read through a 1-D view."""
    if node.target is not torch.ops.aten.as_strided.default or not isinstance(node.args[0], fx.Node):
        return False
    x = node.args[0].meta.get("val")
    out = node.meta.get("val")
    if not isinstance(x, torch.Tensor) or x.dim() != 0 or x.layout != torch.strided or \
            not isinstance(out, torch.Tensor):
        return False
    size, stride = node.args[1], node.args[2]
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    if not all(isinstance(v, int) for v in (*size, *stride)) or \
            offset is not None and offset != x.storage_offset() or \
            not all(n <= 1 or st == 0 for n, st in zip(size, stride)):
        return False
    node.target = torch.ops.aten.expand.default
    node.args, node.kwargs = (node.args[0], list(size)), {}
    return True


def fill_empty_results(gm: fx.GraphModule) -> None:
    """An op whose tensor results all have no elements computes nothing: it becomes a
    fill of its result's shape and dtype (which compiles), instead of an eager island
    for torch-mlir's zero-size arithmetic (see _reshapes_empty). Not random ops (the
    generator's state is theirs to advance), mutating ops, token ops, or ops with a
    non-tensor result. An op whose tensor inputs all have no elements becomes the
    constant it computes (_fold_empty_inputs); a cat drops its empty inputs
    (_cat_without_empty_inputs); as_strided of a 0-d tensor that reads its one element
    is an expand (_as_strided_of_scalar: torch-mlir's lowering crashed on it)."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or is_random(node):
            continue
        if node.target._schema.is_mutable or op_name(node.target) in _TOKEN_OPS:
            continue
        if _cat_without_empty_inputs(node) or _as_strided_of_scalar(gm, node):
            continue
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (tuple, list)) else [val]
        if not vals or not all(isinstance(v, torch.Tensor) and v.numel() == 0 and v.layout == torch.strided
                                and not v.is_complex() for v in vals):
            _fold_empty_inputs(gm, node)
            continue
        if not node.all_input_nodes:
            continue   # already a factory
        users = [node] if isinstance(val, torch.Tensor) else [u for u in node.users if u.target is operator.getitem]
        if len(users) != len(node.users) and not isinstance(val, torch.Tensor):
            continue   # the tuple itself is used
        for u in users:
            v = u.meta.get("val")
            if not isinstance(v, torch.Tensor):
                break
            with gm.graph.inserting_before(node):
                fill = fill_node(gm.graph, v, 0)
            fill.meta = dict(u.meta)
            u.replace_all_uses_with(fill)
            if u is not node:
                gm.graph.erase_node(u)
        if not node.users:
            gm.graph.erase_node(node)
    gm.graph.lint()


def partition(gm: fx.GraphModule, forced: dict[str, str] | None = None) -> list[Part]:
    """Parts in execution order. `forced`: node name -> reason to run it eagerly."""
    forced = forced or {}
    host = _host_outputs(gm)
    from_input: set[fx.Node] = set()   # nodes whose value depends on a graph input
    stage: dict[fx.Node, int] = {}
    eager: dict[fx.Node, str | None] = {}
    last_random = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            from_input.add(node)
            continue
        if node.op != "call_function":
            continue
        deps = [d for d in node.all_input_nodes if d.op == "call_function"]
        if any(d in from_input for d in node.all_input_nodes):
            from_input.add(node)
        if node.target is operator.getitem and deps:
            src = node.args[0]
            eager[node], stage[node] = eager[src], stage[src]
            continue
        reason = forced.get(node.name) or (_HOST if node in host else _eager_reason(node, from_input))
        eager[node] = reason
        if reason is not None:
            s = max([stage[d] for d in deps], default=0)
            if is_random(node):
                s = last_random = max(s, last_random)
        else:
            s = max([stage[d] + (1 if eager[d] else 0) for d in deps], default=0)
        stage[node] = s
    # A view only eager islands read joins them: in a compiled part it was a copy
    # kernel, and the island copied it back to eager's strides (transformers' MoE
    # on CUDA: each expert weight transposed for grouped_mm, two copies of 64 MiB
    # per weight per call). Reverse order takes chains of views along.
    for node in reversed(list(stage)):
        if eager[node] is not None or node.target is operator.getitem or \
                not getattr(node.target, "is_view", False):
            continue
        users = list(node.users)
        if users and all(u in stage and eager[u] is not None and u.target is not operator.getitem
                         for u in users):
            eager[node] = _VIEW_FOR_ISLAND
            stage[node] = min(stage[u] for u in users)
    # Compiled nodes move to the latest stage their users allow: work that
    # depends only on inputs (e.g. a weight's dtype conversion feeding a
    # matmul) stays in the part that consumes it, where it fuses, instead of
    # materializing in the first part.
    last = max(stage.values(), default=0)
    for node in reversed(list(stage)):
        if eager[node] is not None or node.target is operator.getitem:
            continue
        late = last
        for u in node.users:
            for v in (u.users if u.target is operator.getitem else (u,)):
                if v in stage:
                    late = min(late, stage[v])
        stage[node] = late
        for u in node.users:
            if u.target is operator.getitem:
                stage[u] = late
    parts: dict[tuple[int, bool], Part] = {}
    for node in gm.graph.nodes:
        if node in stage:
            key = (stage[node], eager[node] is not None)
            part = parts.setdefault(key, Part(eager=key[1], stage=key[0]))
            part.nodes.append(node)
            if eager[node] not in (None, _VIEW_FOR_ISLAND) and node.target is not operator.getitem:
                part.reasons[node.name] = eager[node]
    # A compiled part of views only (slices, expands of an input) computes
    # nothing: no launch plan (it would copy), its outputs are views of its inputs.
    for p in parts.values():
        if not p.eager and all(n.target is operator.getitem or getattr(n.target, "is_view", False) for n in p.nodes):
            p.eager = p.views = True
    # Stage order; within a stage the compiled part first (eager nodes of
    # stage s read compiled results of stage s).
    return [parts[k] for k in sorted(parts, key=lambda k: (k[0], k[1]))]


def _broadcast_in_dim(a, shape, broadcast_dimensions):
    """prims.broadcast_in_dim through aten: a view of `a` with unit dims inserted
    where `broadcast_dimensions` has none of its dims, expanded to `shape`."""
    sizes = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        sizes[d] = a.shape[i]
    return a.view(sizes).expand(shape)


def eager_prims_to_aten(graph: fx.Graph) -> None:
    """prims ops of a graph that runs through torch, called as their aten
    equivalents: eager prims ops are Python reference implementations, 35-160 µs
    a call on the CPU (prims.squeeze 199 µs against aten.squeeze's 5.6), and the
    decomposition table leaves them around views an eager island reads (an
    nn.LSTM's mkldnn_rnn_layer island ran 0.41x eager, two prims.squeeze
    included). Same values and views: each aten op computes what the prims op
    does (collapse_view/split_dim as flatten/unflatten, which are views where
    the prims op is defined). with_effects (a higher-order op) calls its op
    directly (_with_effects_direct)."""
    P = torch.ops.prims
    for n in graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.higher_order.with_effects and \
                len(n.args) >= 2 and isinstance(n.args[1], torch._ops.OpOverload):
            n.target = _with_effects_direct
        if n.op != "call_function" or n.kwargs:
            continue
        t, args = n.target, n.args
        if t is P.squeeze.default:
            n.target = aten.squeeze.dims
        elif t is P.convert_element_type.default and len(args) == 2:
            n.target, n.args, n.kwargs = aten._to_copy.default, (args[0],), {"dtype": args[1]}
        elif t is P.view_of.default:
            n.target = aten.alias.default
        elif t is P.transpose.default:
            n.target = aten.permute.default
        elif t is P.where.default:
            n.target = aten.where.self
        elif t is P.collapse_view.default and len(args) == 3:   # end inclusive, as flatten's
            n.target = aten.flatten.using_ints
        elif t is P.split_dim.default and len(args) == 3:
            n.target, n.args = aten.unflatten.int, (args[0], args[1], [args[2], -1])
        elif t is P.broadcast_in_dim.default and len(args) == 3:
            n.target = _broadcast_in_dim


def _with_effects_direct(token, op, *args, **kwargs):
    """with_effects(token, op, *args) as an eager island runs it: `op` called directly, the
    token passed on (it only orders the effects, which the island's node order keeps). The
    higher-order op dispatches through Python (its mode and fake-tensor layers, a new token
    tensor): 44 us a call against 8 for aten._linalg_check_errors itself (1 thread, Zen 4),
    twice per call of a Kalman filter step (linalg.solve and linalg.inv each checked)."""
    out = op(*args, **kwargs)
    return (token, *out) if isinstance(out, tuple) else (token, out)


def extract(gm: fx.GraphModule, part: Part, used_later: set[fx.Node]) -> tuple[fx.GraphModule, list, list]:
    """A GraphModule computing `part`: (module, input nodes, output nodes).
    Constants (get_attr) are copied into the part; every other value from
    outside becomes a placeholder with the original node's meta."""
    inside = set(part.nodes)
    inputs: list[fx.Node] = []
    for node in part.nodes:
        for d in node.all_input_nodes:
            if d not in inside and d.op != "get_attr" and d not in inputs:
                inputs.append(d)
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for d in inputs:
        p = g.placeholder(d.name)
        p.meta = dict(d.meta)
        env[d] = p

    def arg(n: fx.Node) -> fx.Node:
        if n not in env:   # a constant
            env[n] = g.node_copy(n)
        return env[n]

    for node in part.nodes:
        env[node] = g.node_copy(node, arg)
    outputs = [n for n in part.nodes if n in used_later and isinstance(n.meta.get("val"), torch.Tensor)]
    g.output(tuple(env[n] for n in outputs))
    if part.eager and not part.views:
        eager_prims_to_aten(g)
    module = fx.GraphModule(gm, g)
    return module, inputs, outputs


def note_user_line(e: BaseException) -> None:
    """Adds the user's file:line of the graph op that raised `e` (eager's error out of an
    island: an index out of range, a LAPACK failure) as a note: the traceback of a compiled
    call ends in mlircap's runner, where eager's names the user's line."""
    from .backend import _node_loc

    node = None
    tb = e.__traceback__
    while tb is not None:   # the innermost generated forward of a graph module
        code = tb.tb_frame.f_code
        if code.co_filename.startswith("<eval_with_key>") and code.co_name == "forward":
            gm = tb.tb_frame.f_locals.get("self")
            idx = (getattr(gm, "_lineno_map", None) or {}).get(tb.tb_lineno - code.co_firstlineno)
            if idx is not None and isinstance(gm, fx.GraphModule):
                node = list(gm.graph.nodes)[idx]
        tb = tb.tb_next
    loc = _node_loc(node) if node is not None else None
    if loc is None or loc.startswith("<") or any("(mlircap:" in n for n in getattr(e, "__notes__", ())):
        return
    t = node.target
    if t is _with_effects_direct or t is torch.ops.higher_order.with_effects:
        t = node.args[1]
    name = op_name(t).replace("::", ".") if hasattr(t, "_schema") else getattr(t, "__qualname__", str(t))
    e.add_note(f"(mlircap: raised by {name} at {loc} in the compiled call)")


class PartitionedGraph:
    """Runs the parts of a graph in order, each either a compiled graph or an
    eager island (an FX GraphModule run by torch). Values are dropped after
    their last use."""

    def __init__(self, gm: fx.GraphModule, steps: list[tuple[object, list[fx.Node], list[fx.Node]]]):
        slots: dict[fx.Node, int] = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for n in placeholders:
            slots[n] = len(slots)
        self.n_inputs = len(placeholders)
        for _, _, outs in steps:
            for n in outs:
                slots[n] = len(slots)
        out_args = gm.graph.output_node().args[0]
        self._single = isinstance(out_args, fx.Node)
        outs = [out_args] if self._single else list(out_args)
        self._out = [(slots[o], None) if isinstance(o, fx.Node) and o in slots else (None, o) for o in outs]
        for o in outs:
            if isinstance(o, fx.Node) and o not in slots:
                raise RuntimeError(f"graph output {o.name} is produced by no part")
        last_use: dict[int, int] = {}
        for k, (_, ins, _) in enumerate(steps):
            for n in ins:
                last_use[slots[n]] = k
        keep = {s for s, _ in self._out if s is not None}
        self.steps = []
        for k, (fn, ins, outs_k) in enumerate(steps):
            free = [s for s, last in last_use.items() if last == k and s not in keep and s >= self.n_inputs]
            if isinstance(fn, fx.GraphModule):
                # its generated forward, not the module's __call__: an op raising there (an
                # index out of range, eager's error) printed FX's 'Call using an FX-traced
                # Module' report on stderr and dropped the traceback (eager prints nothing)
                fn = fn.forward
            self.steps.append((fn, [slots[n] for n in ins], [slots[n] for n in outs_k], free))
        self.n_slots = len(slots)
        self.whole = None   # runtime.cuda.WholeGraph running it as one CUDA graph, if set

    def __call__(self, *args):
        if self.whole is not None and self.whole.active:
            return self.whole(*args)
        return self.run_parts(*args)

    def run_parts(self, *args):
        env = list(args) + [None] * (self.n_slots - len(args))
        try:
            for fn, ins, outs, free in self.steps:
                res = fn(*[env[i] for i in ins])
                for s, v in zip(outs, res):
                    env[s] = v
                for s in free:
                    env[s] = None
        except Exception as e:
            note_user_line(e)
            raise
        result = [env[s] if s is not None else lit for s, lit in self._out]
        return result[0] if self._single else result
