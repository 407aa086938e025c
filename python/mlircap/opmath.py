"""bfloat16/float16 ops computed as eager computes them: in float32, rounded once.

Eager's CPU kernels compute a bfloat16/float16 op in float32 ("opmath") and
round its result once.  torch-mlir lowers some single ops to several linalg
operations (floor division is a division and a floor, gelu a polynomial, fmod
a division, a truncation and a multiply-subtract), each computed in the
tensor's dtype: every intermediate was rounded to bfloat16, and results
differed from eager's (floor_divide 1.0 off, gelu on 17% of the elements).

`compute_in_float32` rewrites an aten graph so that every pointwise op with a
bfloat16/float16 operand reads float32 conversions of its operands and its
result is converted back to the op's dtype: each op rounds exactly once, where
eager rounds.  The conversions are exact (bf16/f16 -> f32) and fuse into the
kernels around them.  Ops that only move or select elements, conversions and
random ops are left alone; reductions already accumulate in float32
(frontend._OPMATH_REDUCTIONS).
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable

import torch
import torch.fx as fx

from .fxutil import op_name
from .thread_reads import compile_threads
from .target import device_type

aten = torch.ops.aten
prims = torch.ops.prims

LOW = (torch.bfloat16, torch.float16)

# Not pointwise-tagged, but computed in opmath by eager. (Low-precision floor
# division and cross never get here: they run through torch, partition.EAGER_NUMERICS.)
_EXTRA = {"aten::nansum"}
# Pointwise-tagged ops that only select, copy or convert: nothing to round.
_SKIP = {"prims::convert_element_type", "aten::clone", "aten::where", "aten::masked_fill"}


# Arguments whose meaning depends on the low dtype the op runs in, given explicitly
# before it runs in float32:
# * defaults: nan_to_num's default posinf (finfo(float32).max) rounds to inf in
#   bfloat16/float16, where eager gives finfo(dtype).max;
# * Python numbers eager's kernel converts to the tensor's dtype first (measured over
#   1e5 bf16/f16 values: add/sub/rsub's other, pow's exponent or base, fmod/remainder's
#   divisor; `x + 0.1` added bfloat16(0.1), 5% of the sums one unit off). Other kernels
#   (mul, div, lerp, leaky_relu, elu, softshrink, ...) read the number in float32 as it is.
_DTYPE_DEFAULTS = {"aten::nan_to_num": {"posinf": lambda fi: fi.max, "neginf": lambda fi: fi.min}}
_ROUNDED_NUMBERS = {"aten::add": ("self", "other", "alpha"), "aten::sub": ("self", "other", "alpha"),
                    "aten::rsub": ("other", "alpha"),
                    "aten::pow": ("self", "exponent"), "aten::fmod": ("other",), "aten::remainder": ("other",)}


# Tensor operands of another dtype than the op's bfloat16/float16 result (`x - t` of a bf16 x
# and an int32 / float32 0-dim t: the result is bf16): eager's CPU kernels read them converted
# to the result's dtype first (TensorIterator's common dtype; through float32, as c10 converts
# an int or a double), as they do Python numbers (_ROUNDED_NUMBERS). Computed in float32, t was
# read as it is (fuzz_graphs edges seed 501: 99840 - int32 100000 gave -160, eager's 0). But
# for a one-element second operand of mul / div, which those kernels read as it is (in float32:
# the scalar path, TensorIterator.original_scalar_value); measured over 4000 values each.
_ROUNDED_OPERANDS = {"aten::add", "aten::sub", "aten::rsub", "aten::mul", "aten::div", "aten::maximum",
                     "aten::minimum", "aten::fmax", "aten::fmin", "aten::atan2", "aten::fmod", "aten::remainder",
                     "aten::hypot", "aten::logaddexp", "aten::logaddexp2", "aten::copysign", "aten::pow"}
_SCALAR_READ = {"aten::mul", "aten::div"}


def reads_rounded(name: str, v, dtype: torch.dtype, second: bool) -> bool:
    """Whether eager's CPU kernel of the op `name` ("aten::fmod") with a low-precision result of
    `dtype` reads its tensor operand `v` (of another dtype; `second`: v is the op's second
    operand and not its first) converted to `dtype` first (_ROUNDED_OPERANDS)."""
    if name not in _ROUNDED_OPERANDS or not isinstance(v, torch.Tensor) or v.dtype == dtype or \
            v.dtype.is_complex or v.dtype in LOW:
        return False
    try:
        scalar = int(v.numel()) == 1
    except (TypeError, RuntimeError):   # symbolic sizes
        return False
    return not (name in _SCALAR_READ and scalar and second)


def _rounded_operand(node: fx.Node, a: fx.Node, dtype: torch.dtype) -> bool:
    """Whether eager reads the tensor operand `a` (not of `dtype`, the low result dtype) of
    `node` converted to `dtype` (_ROUNDED_OPERANDS)."""
    second = len(node.args) > 1 and node.args[1] is a and node.args[0] is not a
    return reads_rounded(op_name(node.target), a.meta.get("val"), dtype, second)


def rounded_through(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t` converted to `dtype` as c10 converts an int or a double to bfloat16 / float16
    (through float32), back in float32."""
    return t.to(torch.float32).to(dtype).to(torch.float32)


def as_dtype_scalar(v, dtype: torch.dtype):
    """The Python number `v` converted to `dtype` as eager converts a scalar operand
    (rounded to bfloat16 / float32, wrapped to int8), as a Python number again; `v`
    itself where it does not fit torch's int64 / float64. Safe while tracing (the
    conversion is not recorded)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or dtype.is_complex or dtype == torch.bool:
        return v
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    with unset_fake_temporarily(), disable_proxy_modes_tracing():   # a constant, not part of a trace
        try:
            t = torch.tensor(v, dtype=torch.float64 if isinstance(v, float) else torch.int64)
        except (OverflowError, RuntimeError):
            return v
        return t.to(dtype).item()


def pin_dtype_defaults(op, args: tuple, kwargs: dict, dtype: torch.dtype,
                       rounded_numbers: bool = True) -> tuple[tuple, dict]:
    """`args`, `kwargs` of a call of `op` on `dtype` (bfloat16/float16) with the
    arguments whose meaning depends on that dtype made explicit (_DTYPE_DEFAULTS,
    _ROUNDED_NUMBERS), so that the call means the same when computed in float32."""
    name = op_name(op) if isinstance(op, torch._ops.OpOverload) else None
    defaults, rounded = _DTYPE_DEFAULTS.get(name), _ROUNDED_NUMBERS.get(name) if rounded_numbers else None
    if not defaults and not rounded:
        return args, kwargs
    names = [a.name for a in op._schema.arguments]
    kwargs = dict(kwargs)
    args = list(args)

    def update(arg, fn):
        i = names.index(arg)
        if i < len(args):
            args[i] = fn(args[i])
        elif arg in kwargs:
            kwargs[arg] = fn(kwargs[arg])
        else:
            kwargs[arg] = fn(None)

    fi = torch.finfo(dtype)
    for arg, default in (defaults or {}).items():
        update(arg, lambda v, default=default: default(fi) if v is None else v)
    for arg in rounded or ():
        if arg in names:
            i = names.index(arg)
            if i < len(args) or arg in kwargs:
                update(arg, lambda v: as_dtype_scalar(v, dtype))
    return tuple(args), kwargs


def _computes(node: fx.Node) -> bool:
    t = node.target
    if node.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in t.tags or "dtype" in node.kwargs:
        return False
    name = op_name(t)
    return name not in _SKIP and (name in _EXTRA or torch.Tag.pointwise in t.tags)


def _low(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dtype in LOW


def _as(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`v` (a FakeTensor of the graph's metadata) converted to `dtype`."""
    mode = getattr(v, "fake_mode", None)
    if mode is None:
        return v.to(dtype)
    with mode:
        return v.to(dtype)


def compute_in_float32(gm: fx.GraphModule, only: Callable[[fx.Node], bool] | None = None,
                       rounded_numbers: bool = True) -> fx.GraphModule | None:
    """A copy of `gm` whose low-precision pointwise ops (those `only` selects, if given)
    compute in float32 and round once (module docstring), or None when there is nothing
    to rewrite. `rounded_numbers`: Python numbers of _ROUNDED_NUMBERS are rounded to the
    op's dtype first, as eager's CPU kernels do (its CUDA kernels read them in float32).
    Inputs and outputs keep their dtypes; node names are kept."""
    targets = [n for n in gm.graph.nodes if _computes(n) and _low(n.meta.get("val")) and (only is None or only(n))]
    if not targets:
        return None
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, env))
    for old in targets:
        n, want = env[old], old.meta["val"]
        n.args, n.kwargs = pin_dtype_defaults(n.target, n.args, n.kwargs, want.dtype, rounded_numbers)
        with graph.inserting_before(n):
            for a in n.all_input_nodes:
                v = a.meta.get("val")
                if _low(v):
                    up = graph.call_function(prims.convert_element_type.default, (a, torch.float32))
                    up.meta["val"] = _as(v, torch.float32)
                    n.replace_input_with(a, up)
                elif rounded_numbers and _rounded_operand(n, a, want.dtype):
                    x = a
                    for dt in ((torch.float32,) if v.dtype != torch.float32 else ()) + (want.dtype, torch.float32):
                        x = graph.call_function(prims.convert_element_type.default, (x, dt))
                        x.meta["val"] = _as(v, dt)
                    n.replace_input_with(a, x)
        n.meta["val"] = _as(want, torch.float32)
        n.meta.pop("tensor_meta", None)
        last = _scalar_loop_tail(graph, n, want, [a.meta.get("val") if isinstance(a, fx.Node) else a
                                                  for a in old.args], _out_tensor(old)) if rounded_numbers else n
        with graph.inserting_after(last):
            down = graph.call_function(prims.convert_element_type.default, (last, want.dtype))
        down.meta["val"] = want
        n.replace_all_uses_with(down, delete_user_cb=lambda u, down=down: u is not down and u is not last)
    graph.lint()
    return fx.GraphModule(gm, graph)


# bf16/f16 add / sub / rsub with alpha != 1 on the CPU (ufunc add: `self + alpha * other`, alpha
# converted to the tensor's dtype): its vector loop computes vec::fmadd(other, alpha, self) in
# float32 and rounds once, as compute_in_float32 does; its scalar loop's BFloat16 / Half
# arithmetic rounds the product alpha * other to the dtype before the sum. Which elements each
# loop computes follows TensorIterator (eager_loop): the inner loop runs along the operands'
# fastest dim; where every operand is contiguous along it (or all but one, which is one element
# there), the vector loop takes each run of the inner loop in blocks (eager_vector_block) and the
# scalar loop the rest of the run; otherwise (a transposed, sliced or broadcast operand along the
# inner dim) the scalar loop computes every element. Measured: 24 bf16 values, alpha 0.7: 6 of 24
# one unit off when computed as the vector loop; transposed / strided / broadcast operands 86 of
# 148 forms off with the vector loop's values at the contiguous positions (/tmp/h26/p1w).
# rsqrt likewise: its vector loop computes 1 / sqrt(x) in float32 and rounds once, its scalar
# loop rounds the square root first (bf16 / f16: 14% of the elements differ between the loops;
# 9 of 24 bf16 values one unit off when computed as the vector loop).
_ALPHA_OPS = {"aten::add", "aten::sub", "aten::rsub"}
_GRAIN = 32768   # at::internal::GRAIN_SIZE: larger loops are split between threads


def _out_tensor(node: fx.Node):
    """The metadata of the out= tensor eager's op of `node` wrote its result into, or None:
    the capture records `op(*args, out=t)` of a t whose strides differ from the op's own result
    as `t.copy_(op(*args))`, the copy marked (restrides._out_layout_kept); aot_autograd hands
    the mark on to the aten copy."""
    users = list(node.users)
    if len(users) != 1 or users[0].target is not aten.copy.default or len(users[0].args) != 2 or \
            users[0].args[1] is not node or not (users[0].meta.get("custom") or {}).get("mlircap_out_copy"):
        return None
    dst = users[0].args[0].meta.get("val") if isinstance(users[0].args[0], fx.Node) else None
    return dst if isinstance(dst, torch.Tensor) else None


@functools.lru_cache(maxsize=None)
def eager_vector_block(dtype: torch.dtype) -> int | None:
    """The number of elements eager's CPU add kernel of `dtype` computes per vector-loop step
    (the scalar loop takes the rest), measured: the one block size for which vector-loop values
    before the last full block and scalar-loop values after it reproduce eager's add(x, y,
    alpha=0.7) at several sizes; None when no size does."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    with unset_fake_temporarily(), disable_proxy_modes_tracing():
        g = torch.Generator().manual_seed(0)
        a = torch.tensor(0.7).to(dtype).float()
        fits = {8, 16, 32, 64, 128}
        for n in (47, 60, 100, 120, 250, 333, 1017):
            x = (torch.randn(n, generator=g) * 100).to(dtype)
            y = (torch.randn(n, generator=g) * 100).to(dtype)
            e = torch.add(x, y, alpha=0.7)
            vec = (x.float() + y.float() * a).to(dtype)
            sca = (x.float() + (y.float() * a).to(dtype).float()).to(dtype)
            pos = torch.arange(n)
            fits = {b for b in fits if torch.equal(e, torch.where(pos >= n // b * b, sca, vec))}
        return fits.pop() if len(fits) == 1 else None


def eager_loop(operands, shape, dtype: torch.dtype, out=None) -> tuple[list[int], int, bool] | None:
    """How eager's CPU TensorIterator runs a pointwise kernel of `dtype` over operands (tensors,
    or Python numbers) broadcast to `shape`, its result allocated by the iterator: (the result's
    dims from the outermost to the innermost of its loop, the size of the inner loop (the
    innermost dims it coalesces), whether the kernel's vector loop runs: every operand
    contiguous along the inner loop, or all but one which is one element along it (Loops.h
    VectorizedLoop2d)). As TensorIteratorBase: an operand of another dtype is read converted to
    `dtype` (`.to`, which keeps a dense layout and makes others contiguous); reorder_dimensions
    sorts the dims by the inputs' strides (the first input whose strides tell decides, equal
    strides put the smaller dim inside), the result is allocated dense in that order, and
    coalesce_dimensions merges adjacent dims every operand steps through alike. `out`: the
    result is that tensor (an out= argument of the result's shape, not resized), whose strides
    come first in the sort (TensorIterator's operands: outputs, then inputs). None for
    symbolic sizes."""
    try:
        shape = [int(s) for s in shape]
        nd = len(shape)
        strides = []
        for v in operands:
            if not isinstance(v, torch.Tensor):
                strides.append([0] * nd)
                continue
            if v.dtype != dtype:
                v = _as(v, dtype)
            st = [0] * (nd - v.dim()) + [int(s) for s in v.stride()]
            sz = [1] * (nd - v.dim()) + [int(s) for s in v.shape]
            strides.append([0 if s == 1 and n != 1 else t for s, t, n in zip(sz, st, shape)])
        if out is not None:
            if [int(s) for s in out.shape] != shape:
                return None
            given = [0 if n == 1 else int(t) for t, n in zip(out.stride(), shape)]
    except (TypeError, RuntimeError):   # symbolic sizes / strides
        return None
    perm = list(range(nd))[::-1]   # innermost first, as TensorIterator's

    def should_swap(d0, d1):
        for st in ([given] if out is not None else []) + strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return 1 if s0 > s1 else -1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    res, step = [0] * nd, 1
    for d in perm:
        res[d], step = step, step * shape[d]
    everyone = [res if out is None else given] + strides
    inner, inner_strides = (shape[perm[0]], [st[perm[0]] for st in everyone]) if nd else (1, [1] + [0] * len(strides))
    for d in perm[1:]:   # coalesce into the inner loop while every operand steps on alike
        if not (inner == 1 or shape[d] == 1 or all(inner * s0 == st[d] for s0, st in zip(inner_strides, everyone))):
            break
        if inner == 1:
            inner_strides = [st[d] for st in everyone]
        inner *= shape[d]
    ins = inner_strides[1:]
    vector = inner_strides[0] == 1 and (all(s == 1 for s in ins) or any(
        s == 0 and all(t == 1 for j, t in enumerate(ins) if j != k) for k, s in enumerate(ins)))
    return perm[::-1], inner, vector


def _scalar_loop_tail(graph: fx.Graph, n: fx.Node, want: torch.Tensor, operands: list, out=None) -> fx.Node:
    """After `n` (an op of _SCALAR_LOOP_OPS computed in float32 by compute_in_float32;
    `operands`: its tensor arguments as the graph had them, metadata or numbers): the elements
    eager's scalar loop computes, as that loop rounds them (add / sub / rsub with alpha: the
    product rounded to want's dtype; rsqrt: the square root rounded before its reciprocal); the
    node giving the op's float32 result. `out`: the out= tensor eager's op wrote (_out_tensor)."""
    name = op_name(n.target)
    alpha = n.kwargs.get("alpha", 1)
    if device_type(want) != "cpu":
        return n
    if name == "aten::rsqrt":
        if len(n.args) != 1 or not isinstance(n.args[0], fx.Node) or len(operands) != 1:
            return n
    elif name not in _ALPHA_OPS or n.target._overloadname not in ("Tensor", "Scalar") or isinstance(alpha, bool) or \
            not isinstance(alpha, (int, float)) or alpha == 1 or len(n.args) != 2 or len(operands) != 2 or \
            not all(isinstance(a, fx.Node) or (isinstance(a, (int, float)) and not isinstance(a, bool)) for a in n.args):
        return n
    block = eager_vector_block(want.dtype)
    loop = eager_loop(operands, want.shape, want.dtype, out) if block is not None else None
    if loop is None:
        return n
    perm, inner, vector = loop
    total = want.numel()
    # (the thread count only where eager's chunks can cut the vector loop's runs: this graph is
    # then compiled for this count, thread_reads)
    threads = compile_threads() if vector and total >= _GRAIN else 1
    chunk = total if total < _GRAIN or threads == 1 else -(-total // min(threads, -(-total // _GRAIN)))
    if vector and inner < block and chunk == total:
        vector = False   # (every run shorter than a block)
    self_, other = (n.args if name != "aten::rsub" else n.args[::-1]) if len(n.args) == 2 else (None, None)
    # (rsub: other - alpha * self)
    sign = -1 if name != "aten::add" else 1
    f32 = torch.float32
    out32 = n.meta["val"]
    mode = getattr(want, "fake_mode", None)

    def add(target, args, kwargs=None):
        node = graph.call_function(target, tuple(args), kwargs or {})
        with (mode if mode is not None else contextlib.nullcontext()):
            node.meta["val"] = target(*[a.meta["val"] if isinstance(a, fx.Node) else a for a in args], **(kwargs or {}))
        return node

    with graph.inserting_before(n.next):   # (in order after n)
        if name == "aten::rsqrt":   # 1 / std::sqrt(x) of c10::BFloat16 / Half: two roundings
            low = add(prims.convert_element_type.default, [add(aten.sqrt.default, [n.args[0]]), want.dtype])
            tail = add(aten.reciprocal.default, [add(prims.convert_element_type.default, [low, f32])])
        elif isinstance(other, fx.Node):
            low = add(prims.convert_element_type.default, [add(aten.mul.Scalar, [other, float(alpha) * sign]), want.dtype])
            up = add(prims.convert_element_type.default, [low, f32])
            tail = add(aten.add.Tensor, [self_, up] if isinstance(self_, fx.Node) else [up, self_])
        else:   # other a number (already the dtype's, pin_dtype_defaults): the product is one too
            prod = float(torch.tensor(float(other) * float(alpha) * sign, dtype=torch.float64).to(want.dtype))
            tail = add(aten.add.Tensor, [self_, prod])
        if tail.meta["val"].shape != out32.shape:
            tail = add(aten.expand.default, [tail, list(out32.shape)])
        if not vector:
            return tail
        # each run of the inner loop: the rows of the loop in its order, cut where a thread's
        # chunk of the elements ends (at::parallel_for over TensorIterator's linear index)
        pos = add(aten.arange.default, [total], {"dtype": torch.int64, "device": want.device})
        row = add(aten.sub.Tensor, [pos, add(aten.remainder.Scalar, [pos, inner])])
        start, end = row, add(aten.add.Scalar, [row, inner])
        if chunk < total:
            part = add(aten.sub.Tensor, [pos, add(aten.remainder.Scalar, [pos, chunk])])
            start = add(aten.maximum.default, [row, part])
            end = add(aten.minimum.default, [end, add(aten.add.Scalar, [part, chunk])])
        length = add(aten.sub.Tensor, [end, start])
        full = add(aten.sub.Tensor, [length, add(aten.remainder.Scalar, [length, block])])
        scalar = add(aten.ge.Tensor, [add(aten.sub.Tensor, [pos, start]), full])
        scalar = add(aten.view.default, [scalar, [int(want.shape[d]) for d in perm]])
        scalar = add(aten.permute.default, [scalar, [perm.index(d) for d in range(len(perm))]])
        return add(aten.where.self, [scalar, tail, n])


@functools.lru_cache(maxsize=None)
def eager_nan_block(dtype: torch.dtype, kernel: str = "elu_backward") -> int | None:
    """The number of elements eager's CPU elu_backward kernel of `dtype` computes per vector-loop
    step, measured on NaN inputs (its vector loop sends a NaN to the negative branch, a NaN
    gradient; its scalar loop, taking the rest of each inner loop, to the positive one: the
    gradient times scale): the one block size that gives the NaN positions at several sizes;
    None when no size does. kernel="hardtanh_backward" / "softshrink_backward" /
    "hardshrink_backward": that kernel's (its vector loop gives a NaN input a zero gradient, its
    scalar loop passes the gradient)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    with unset_fake_temporarily(), disable_proxy_modes_tracing():
        fits = {8, 16, 32, 64, 128}
        for n in (47, 60, 100, 120, 250, 333, 1017):
            x = torch.full((n,), float("nan"), dtype=dtype)
            if kernel == "hardtanh_backward":
                e = aten.hardtanh_backward.default(torch.ones(n, dtype=dtype), x, -1.0, 1.0) == 0
            elif kernel in ("softshrink_backward", "hardshrink_backward"):
                e = getattr(aten, kernel).default(torch.ones(n, dtype=dtype), x, 0.5) == 0
            else:
                e = aten.elu_backward.default(torch.ones(n, dtype=dtype), 1.0, 1.0, 1.0, False, x).isnan()
            pos = torch.arange(n)
            fits = {b for b in fits if torch.equal(e, pos < n // b * b)}
        return fits.pop() if len(fits) == 1 else None


def vector_loop_positions(operands, shape, dtype: torch.dtype, block: int, device) -> torch.Tensor | bool:
    """Where eager's CPU TensorIterator kernel of `dtype` over `operands` (eager_loop) computes an
    element of its result of `shape` in its vector loop: a bool tensor of `shape` (made with
    torch ops, so traced into a graph), True (every element) or False (none: the scalar loop
    computes all, or the layout is unknown)."""
    loop = eager_loop(operands, shape, dtype)
    if loop is None:
        return False
    perm, inner, vector = loop
    total = 1
    for s in shape:
        total *= int(s)
    threads = compile_threads() if vector and total >= _GRAIN else 1   # (thread_reads: compiled for this count)
    chunk = total if total < _GRAIN or threads == 1 else -(-total // min(threads, -(-total // _GRAIN)))
    if not vector or (inner < block and chunk == total):
        return False
    pos = torch.arange(total, dtype=torch.int64, device=device)
    row = pos - pos % inner
    start, end = row, row + inner
    if chunk < total:
        part = pos - pos % chunk
        start, end = torch.maximum(row, part), torch.minimum(end, part + chunk)
    length = end - start
    vec = (pos - start) < (length - length % block)
    return vec.view([int(shape[d]) for d in perm]).permute([perm.index(d) for d in range(len(perm))])


# Low-precision pointwise ops that torch-mlir lowers to at most one rounding operation in
# their own dtype (test_opmath_gpu checks each against the lowering): on the GPU, whose
# arithmetic runs in the tensor's dtype, they round once, as eager's CUDA kernel rounds its
# float32 result. (A Python number operand is converted to the low dtype first, where eager's
# CUDA kernel reads it in float32: at most one unit off in the result, as before.)
_ROUNDS_ONCE = frozenset(f"aten::{n}" for n in (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "maximum", "minimum", "fmax", "fmin", "clamp",
    "clamp_min", "clamp_max", "hardtanh", "relu6", "threshold", "where", "sign", "floor", "ceil",
    "round", "trunc", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
    "tan", "tanh", "sinh", "atan", "erf", "pow", "square"))


def gpu_computes_in_float32(node: fx.Node) -> bool:
    """Whether the GPU path computes the low-precision pointwise op `node` in float32 and
    rounds once (compute_in_float32's `only`), as eager's CUDA kernels do: every op but
    those lowered to a single rounding step (_ROUNDS_ONCE), and any op with a Python number
    past the low dtype's range (overflowing_number). Left in bfloat16, a composite op rounds
    each step of its lowering: erf-GELU's 1 + erf(x / sqrt(2)) rounded erf to bfloat16
    first, 0.3 off relative to eager's result on 22 of 100 elements (OpInfo on an H100);
    sigmoid, silu, softplus, lerp, add with alpha likewise."""
    v = node.meta.get("val")
    if not _low(v):
        return False
    if overflowing_number(node):
        return True
    name = op_name(node.target)
    if name in ("aten::add", "aten::sub", "aten::rsub") and node.kwargs.get("alpha", 1) != 1:
        return True   # x + alpha * y: a multiply and an add, each rounded
    if name == "aten::div" and node.kwargs.get("rounding_mode") is not None:
        return True
    if name == "aten::round" and node.kwargs.get("decimals", 0) != 0:
        return True
    return name not in _ROUNDS_ONCE


def overflowing_number(node: fx.Node) -> bool:
    """`node` takes a Python number past its low-precision result dtype's range (`h *
    70000.0` on float16): eager computes with the number in float32 (35000.0 for h =
    0.5), while the number converted to float16 first is inf. The GPU path computes
    only these ops in float32 (compute_in_float32's `only`)."""
    v = node.meta.get("val")
    if not _low(v):
        return False
    big = torch.finfo(v.dtype).max
    return any(isinstance(a, (int, float)) and not isinstance(a, bool) and abs(a) > big and math.isfinite(a)
               for a in (*node.args, *node.kwargs.values()))


def lerp_rounded_once(start, end, weight):
    """aten.lerp (.Scalar / .Tensor) of float32 / bfloat16 / float16 on the CPU as eager's
    kernel (native/cpu/LerpKernel.cpp, lerp_vec) computes it: coeff = weight (|weight| < 0.5)
    or weight - 1, base = start or end, then fmadd(coeff, end - start, base) in float32,
    one rounding for the product and the sum (then to bfloat16 / float16). torch's
    decomposition rounds the product first: one unit off on some elements (tensorops seed
    550: 76 of 588 lerps of integers by their sigmoids, amplified by linalg.inv into
    unique's counts). The fused step is the float64 product of the float32 operands (exact)
    plus the float32 base, rounded to float32 (a second rounding differs from the fma's
    only within 2^-29 units of a float32 midpoint). float64 (no wider type) and other
    devices: NotImplemented."""
    if not isinstance(start, torch.Tensor) or not isinstance(end, torch.Tensor) or device_type(start) != "cpu" or \
            start.dtype not in (torch.float32, *LOW) or end.dtype != start.dtype:
        return NotImplemented
    f32, f64 = torch.float32, torch.float64
    s, e = start.to(f32), end.to(f32)
    if isinstance(weight, torch.Tensor):
        if weight.dtype != start.dtype:
            return NotImplemented
        w = weight.to(f32)
        small = w.abs() < 0.5
        coeff = torch.where(small, w, w - 1).to(f64)
        base = torch.where(small, s, e)
    elif isinstance(weight, (int, float)) and not isinstance(weight, bool):
        w = as_dtype_scalar(float(weight), f32)   # eager reads the number as float32 (opmath)
        small = abs(w) < 0.5
        coeff, base = (w, s) if small else (as_dtype_scalar(w - 1, f32), e)
    else:
        return NotImplemented
    out = ((e - s).to(f64) * coeff + base.to(f64)).to(f32)
    return out.to(start.dtype)


def addcmul_rounded_once(self, tensor1, tensor2, *, value=1):
    """aten.addcmul of float32 / bfloat16 / float16 on the CPU as eager's kernel
    (native/cpu/PointwiseOpsKernel.cpp) computes it: `self + value * t1 * t2` in float32, the
    compiler contracting it to fmadd(value * t1, t2, self), so the product `value * t1` is
    rounded and the rest rounded once (measured: every element of float32 / float16
    addcmul of 7 to 1003 random elements, values -0.5, 0.3, 1, 2.5). torch's decomposition
    rounds `value * t1 * t2` before the sum: one unit off on about a quarter of the elements
    (tensorops seed 2076: addcmul of norms of a cholesky factor, one unit that split a run of
    unique_consecutive, another output size). The fused step as lerp_rounded_once's: the
    float64 product of float32 operands plus self, rounded to float32; float64: fma64. Mixed
    dtypes, a value that is not a number and other devices: NotImplemented."""
    ts = (self, tensor1, tensor2)
    if not all(isinstance(t, torch.Tensor) for t in ts) or isinstance(value, bool) or \
            not isinstance(value, (int, float)):
        return NotImplemented
    dt = self.dtype
    if dt not in (torch.float32, torch.float64, *LOW) or any(t.dtype != dt or device_type(t) != "cpu" for t in ts):
        return NotImplemented
    f32, f64 = torch.float32, torch.float64
    if dt == f64:   # the same fmadd in float64 (every element of 7 and 1003, the values above)
        return fma64(*torch.broadcast_tensors(tensor1 * float(value), tensor2, self))
    v = as_dtype_scalar(float(value), f32)   # eager's value.to<float>()
    out = ((tensor1.to(f32) * v).to(f64) * tensor2.to(f64) + self.to(f64)).to(f32)
    return out.to(dt)


def _split(x):
    """Veltkamp's split of float64 `x` (a tensor or a Python float): hi + lo == x, each with
    26 significant bits at most, so products of halves are exact."""
    t = 134217729.0 * x   # 2^27 + 1
    hi = t - (t - x)
    return hi, x - hi


def fma64(x, y, z):
    """float64 x * y + z with the product's rounding error added back (Dekker's product and
    Knuth's sum, error-free): eager's kernels contract `z + y * x` to one fused multiply-add,
    the compiled code has none. Equal to the fma except where the exact result lies within
    2^-52 units of a midpoint between float64 values. `y`: a Python float or a tensor. Where
    the split could overflow (|x| or |y| >= 2^995) or the result is not finite: x * y + z."""
    p = x * y
    xh, xl = _split(x)
    yh, yl = _split(y)
    e = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl   # x * y == p + e
    s = p + z
    b = s - p
    r = s + (((p - (s - b)) + (z - b)) + e)             # s + (p + z - s) + e
    plain = p + z
    big = 2.0 ** 995
    ok = (x.abs() < big) & torch.isfinite(r)
    if isinstance(y, torch.Tensor):
        ok = ok & (y.abs() < big)
    elif not abs(y) < big:
        return plain
    return torch.where(ok, r, plain)


def add_alpha_rounded_once(op):
    """aten.add.Tensor / aten.sub.Tensor (`op`) with a number alpha other than 1 on float32 /
    float64 CPU tensors as eager's kernel computes it: `self + alpha * other` (sub: -alpha) as
    one fused multiply-add, vec::fmadd(other, alpha, self); torch's decomposition rounds the
    product first (float32: a quarter of the elements one unit off; grad seed 2039: float64
    `v1 - 3 * v1[..., :1]` of group_norm outputs where v1 == 3 * v1[..., :1] exactly in reals,
    eager's -1.1e-16, compiled's 0, then a floor division by the gelu of it). float32: the
    float64 product of the float32 operands (exact) plus self, rounded once (as lerp's); float64:
    fma64. Other dtypes, mixed dtypes, other devices, alpha 1: NotImplemented."""
    sign = -1.0 if op is torch.ops.aten.sub.Tensor else 1.0

    def decomposition(self, other, *, alpha=1):
        if not isinstance(self, torch.Tensor) or not isinstance(other, torch.Tensor) or isinstance(alpha, bool) or \
                not isinstance(alpha, (int, float)) or alpha == 1:
            return NotImplemented
        dt = self.dtype
        if dt not in (torch.float32, torch.float64) or other.dtype != dt or device_type(self) != "cpu" or \
                device_type(other) != "cpu":
            return NotImplemented
        if dt == torch.float32:
            a = as_dtype_scalar(float(alpha), torch.float32) * sign   # eager's alpha.to<float>()
            return (other.to(torch.float64) * a + self.to(torch.float64)).to(torch.float32)
        x, s = torch.broadcast_tensors(other, self)
        return fma64(x, float(alpha) * sign, s)

    return decomposition


def ldexp_as_eager(self, other):
    """aten.ldexp.Tensor on the CPU where a bfloat16 / float16 tensor takes part, as eager's
    kernels compute it (native/BinaryOps.cpp): a floating `self` and an integer / bool `other`
    go to std::ldexp (self * 2^other exact, rounded once to self's dtype); else
    self * _pow2(self, other), two kernels, each rounding: 2^other is a 0-d 2.0 of self's dtype
    to the power `other` for a float64 / bfloat16 / float16 self, pow(2.0, other) (other's
    dtype, or float32) for an integer / bool / float32 one. The graph kept ldexp whole and
    computed it in float32, rounding once (fuzz sweep: ldexp(int64 7, float16 x) gave 6e-8 where
    eager's pow(2.0, x) is 0 in float16, then 7 * 0). Other devices and dtypes: NotImplemented."""
    if not isinstance(self, torch.Tensor) or not isinstance(other, torch.Tensor) or \
            device_type(self) != "cpu" or device_type(other) != "cpu" or \
            not any(d in LOW for d in (self.dtype, other.dtype, torch.result_type(self, other))) or \
            self.is_complex() or other.is_complex():
        return NotImplemented
    if self.is_floating_point() and not other.is_floating_point():
        # |self| in [2^-149, 2^128]: past 2^-+400 the float32 result is 0 or inf either way, and
        # within it the float64 product is exact: rounded once to float32 as std::ldexp, then
        # to self's dtype (as eager's kernel converts its float result)
        n = other.clamp(-400, 400).to(torch.float64) if other.dtype != torch.bool else other.to(torch.float64)
        out = self.to(torch.float64) * torch.exp2(n)
        return out.to(torch.float32).to(self.dtype)
    if not self.is_floating_point() or self.dtype == torch.float32:
        two = torch.pow(2.0, other)
    else:
        two = torch.pow(torch.full((), 2.0, dtype=self.dtype, device=self.device), other)
    return torch.mul(self, two)
