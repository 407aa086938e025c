"""Integer ops that torch-mlir lowers through floating point, in integer arithmetic.

torch-mlir lowers some integer ops by converting to float, computing there and
converting back, which is exact only while the values fit the float's mantissa:
* aten.neg on int32/int64 is `fptosi(negf(sitofp x))` in f32: -2147483646 became
  -2147483648 and -(-2147483647) overflowed the conversion (INT_MIN); int64 too;
* floor division (floor_divide, div(rounding_mode="floor")) of int64 goes through
  f64: 9223372036854775807 // 3 was off by 170.
Eager computes both in the integer type, wrapping on overflow (-INT_MIN == INT_MIN).
The decompositions here do the same: negation as a multiplication by -1, floor
division as C's truncating division corrected by one where the remainder is nonzero
and its sign differs from the divisor's (both lower to integer instructions).
Division by zero: eager raises; the compiled division is checked (bounds.py).
"""
from __future__ import annotations

import contextlib
import math
import threading

import torch

aten = torch.ops.aten


def _integer(x) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool


def neg(fallback):
    """aten.neg: integer tensors as x * -1 (wraps like eager); others to `fallback`."""

    def decomposition(x, *args, **kwargs):
        if _integer(x) and not args and not kwargs:
            return aten.mul.Tensor(x, -1)
        return NotImplemented if fallback is None else fallback(x, *args, **kwargs)

    return decomposition


def bool_adds_as_or(gm) -> None:
    """aten.add of bool tensors (a bool result), rewritten in a traced graph: eager's kernel
    computes `a + alpha * b` of C++ bools, whose sum converts back to bool as "nonzero" (a
    logical or where alpha is nonzero); torch-mlir's lowering added in i1, which wraps: `a +
    True` of a True element gave False (bench/fuzz_graphs.py seed 217 --families dtypes, then a
    division by that False). A graph pass, not a decomposition: an entry for aten.add.Tensor in
    the decomposition table, even one returning NotImplemented for other dtypes, changed how
    aot_autograd traced every bfloat16 add (computed in float32 and rounded), and attention
    masks added so were no longer fused."""
    aten = torch.ops.aten
    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in (aten.add.Tensor, aten.add.Scalar):
            continue
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype != torch.bool or len(n.args) < 2:
            continue
        a, b = n.args[0], n.args[1]
        alpha = n.kwargs.get("alpha", n.args[2] if len(n.args) > 2 else 1)
        if not isinstance(a, torch.fx.Node) or isinstance(alpha, torch.fx.Node):
            continue
        with gm.graph.inserting_before(n):
            if not isinstance(b, torch.fx.Node):
                if alpha and bool(b):
                    new = gm.graph.call_function(aten.full_like.default, (a, True))
                else:
                    new = gm.graph.call_function(aten.logical_or.default, (a, a))
            else:
                if not alpha:
                    zeros = gm.graph.call_function(aten.zeros_like.default, (b,))
                    zeros.meta = dict(b.meta)
                    b = zeros
                new = gm.graph.call_function(aten.logical_or.default, (a, b))
        new.meta = dict(n.meta)
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        changed = True
    if changed:
        gm.recompile()


def logical_ops_in_common_dtype(gm) -> None:
    """aten.logical_and / or / xor of operands of two dtypes, rewritten in a traced graph:
    eager's TensorIterator converts both to their common dtype first and then tests for
    nonzero, so an int64 0-dim -2**40 beside an int8 tensor is int8 0, False (and a float64
    1e-300 beside an int tensor float32 0); torch-mlir's lowering tested each operand as it
    is (bench/fuzz_graphs.py --families dtypes seed 2865: logical_xor(x2, v9) of an int64 0-dim
    x2 and an int8 v9, 384 of 384 values wrong at other values)."""
    aten, prims = torch.ops.aten, torch.ops.prims
    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in (aten.logical_and.default, aten.logical_or.default,
                                                        aten.logical_xor.default) or len(n.args) < 2:
            continue
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in n.args[:2]]
        if not all(isinstance(v, torch.Tensor) for v in vals) or vals[0].dtype == vals[1].dtype or \
                any(v.is_complex() for v in vals):
            continue
        common = torch.result_type(*vals)
        for a, v in zip(n.args[:2], vals):
            if v.dtype == common:
                continue
            with gm.graph.inserting_before(n):
                c = gm.graph.call_function(prims.convert_element_type.default, (a, common))
            mode = getattr(v, "fake_mode", None)
            if mode is not None:
                with mode:
                    c.meta["val"] = v.to(common)
            n.replace_input_with(a, c)
            changed = True
    if changed:
        gm.recompile()


def floor_division(op, fallback):
    """floor_divide / div(rounding_mode="floor") of integers as truncating division
    plus a correction; truncating division by a Python int with a 0-dim divisor
    (_as_tensor); anything else (floats, true division) to `fallback`."""

    def decomposition(a, b, *args, **kwargs):
        mode = kwargs.get("rounding_mode", args[0] if args else "floor")
        if mode in ("floor", "trunc") and _python_int(a) and _integer(b):
            # a Python int dividend (torch.floor_divide(300, t), 300 // t): eager converts it to the
            # divisor's dtype, wrapped (a uint8 t divides 44); widened uint8 code divided 300
            a = _as_tensor(b, a)
            if mode == "trunc":
                return aten.div.Tensor_mode(a, b, rounding_mode="trunc")
        if mode in ("floor", "trunc") and _python_int(a) and _python_int(b):
            # two Python ints (torch.floor_divide(-8, 6)): an int64 0-dim result that
            # torch-mlir folded with unsigned division (3074457345618258432 for -2)
            a = aten.scalar_tensor.default(a, dtype=torch.int64)
        if mode == "trunc" and _integer(a) and isinstance(b, int) and not isinstance(b, bool):
            return aten.div.Tensor_mode(a, _as_tensor(a, b), rounding_mode="trunc")   # by a Python int
        if mode != "floor" or not _integer(a) or not (
                _integer(b) or isinstance(b, int) and not isinstance(b, bool)):
            return NotImplemented if fallback is None else fallback(a, b, *args, **kwargs)
        b = _as_tensor(a, b)
        q = aten.div.Tensor_mode(a, b, rounding_mode="trunc")
        r = aten.sub.Tensor(a, aten.mul.Tensor(q, b))
        neg_r = aten.lt.Scalar(r, 0)
        fix = aten.logical_and.default(aten.ne.Scalar(r, 0), aten.ne.Tensor(neg_r, aten.lt.Scalar(b, 0)))
        return aten.sub.Tensor(q, aten._to_copy.default(fix, dtype=q.dtype))

    return decomposition


def _python_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _as_tensor(a, b):
    """An integer divisor `b` of the integer tensor `a`: a Python int as a 0-dim tensor
    of `a`'s dtype, wrapped into it as eager converts it (uint8 % -3 divides by 253,
    int8 % 1000 by -24; the compiled code divided by -3 and 1000: wrong results), and
    as a tensor because torch-mlir's lowerings of the .Scalar overloads crashed on
    int8 (SIGSEGV in the compile worker)."""
    if isinstance(b, torch.Tensor):
        # a wider 0-dim divisor converts to the result's dtype first (uint8 // an int64 -3:
        # by 253), as eager's kernel computes in that dtype
        rt = torch.result_type(a, b)
        return aten._to_copy.default(b, dtype=rt) if b.dtype != rt and not rt.is_floating_point else b
    info = torch.iinfo(a.dtype)
    span = info.max - info.min + 1
    return aten.full.default([], (b - info.min) % span + info.min, dtype=a.dtype, device=a.device)


def scalar_remainder(op):
    """remainder.Scalar / fmod.Scalar of an integer tensor by a Python int as the
    .Tensor overload with a 0-dim divisor (see _as_tensor)."""

    def decomposition(a, b):
        if not _integer(a) or not isinstance(b, int) or isinstance(b, bool):
            return NotImplemented
        return op(a, _as_tensor(a, b))

    return decomposition


def scalar_dividend_remainder(a, b):
    """aten.remainder.Scalar_Tensor (`5 % t`, torch.remainder(5, t)): torch-mlir has no lowering
    for it (it ran through torch). The .Tensor overload of the number as a 0-dim tensor of the
    result's dtype (an int converted to an integer divisor's dtype as eager converts it,
    _as_tensor) and the divisor in that dtype."""
    if not isinstance(b, torch.Tensor) or b.is_complex() or b.dtype == torch.bool or \
            not isinstance(a, (int, float)) or isinstance(a, bool):
        return NotImplemented
    dt = torch.result_type(a, b)
    if b.dtype != dt:
        b = aten._to_copy.default(b, dtype=dt)
    a = aten.full.default([], a, dtype=dt, device=b.device) if dt.is_floating_point else _as_tensor(b, a)
    return aten.remainder.Tensor(a, b)


def bitwise_scalar(tensor_op):
    """aten.bitwise_or / bitwise_xor .Scalar (`x | 6`, `x ^ mask`): torch-mlir has no lowering
    for them (each ran through torch, an island). `tensor_op` (the .Tensor overload) with the
    number as a 0-dim tensor of the result's dtype, converted as eager converts it (int8 | 300
    ors 44: _as_tensor); a bool tensor with an int computes in int64, eager's result type."""

    def decomposition(a, b):
        if not isinstance(a, torch.Tensor) or a.is_floating_point() or a.is_complex() or not isinstance(b, int):
            return NotImplemented
        dt = torch.result_type(a, b)
        if dt == torch.bool:
            return tensor_op(a, aten.full.default([], bool(b), dtype=torch.bool, device=a.device))
        if a.dtype != dt:
            a = aten._to_copy.default(a, dtype=dt)
        return tensor_op(a, _as_tensor(a, b))

    return decomposition


def int8_scalar(tensor_op, fallback):
    """aten.mul.Scalar / aten.sub.Scalar of an int8 tensor and a Python int (what torch's
    decompositions make of `x * 2`: torch.gradient of an int8 tensor, OpInfo gradient int8
    #5): torch-mlir's lowering of these .Scalar overloads on int8 crashed (SIGSEGV in the
    compile worker; contained, the graph ran eagerly). `tensor_op` (the .Tensor overload)
    with the number as a 0-dim int8 tensor, wrapped as eager converts it (_as_tensor: int8
    products and differences are exact modulo 256 either way); other calls: `fallback`."""

    def decomposition(a, b, *args, **kwargs):
        if isinstance(a, torch.Tensor) and a.dtype == torch.int8 and isinstance(b, int):
            if args:   # sub.Scalar's alpha, positional here, keyword-only in sub.Tensor
                kwargs = {**kwargs, "alpha": args[0]}
            return tensor_op(a, _as_tensor(a, int(b)), **kwargs)
        return NotImplemented if fallback is None else fallback(a, b, *args, **kwargs)

    return decomposition


def swapped(fn):
    """fn with its two operands swapped (a commuting op's Scalar_Tensor overload)."""
    return lambda a, b: fn(b, a)


def full_reduction(reduce):
    """aten.max/min over all elements of an integer tensor as amax/amin over every
    dim: torch-mlir's lowering of max.default/min.default on int8 crashed the compile
    worker (SIGSEGV), so the whole graph ran eagerly. Same values in every dtype."""

    def decomposition(x, *args, **kwargs):
        if _integer(x) and not args and not kwargs and x.numel() > 0:
            return reduce(x, list(range(x.dim())))
        return NotImplemented

    return decomposition


def truth_reduction(op, is_all: bool):
    """all/any as a count of nonzero (any) or zero (all) elements compared with 0, for a
    uint8 input (eager's result is uint8, 0 or 1: torch-mlir cannot lower all of
    integers, and its any of a widened uint8 crashed, SIGSEGV) and for the `.dims`
    overloads of any dtype (torch-mlir cannot lower them). An empty dim list reduces
    nothing, as eager: the elementwise truth. NaN counts as nonzero, as in eager.
    Anything else: NotImplemented (the op as it is)."""
    dims_overload = op._overloadname == "dims"

    def decomposition(x, *args, **kwargs):
        if not isinstance(x, torch.Tensor) or x.is_complex() or not (x.dtype == torch.uint8 or dims_overload):
            return NotImplemented
        if op._overloadname == "default":
            if args or kwargs:
                return NotImplemented
            dims, keepdim = None, False
        else:
            dims = args[0] if args else kwargs.get("dim")
            keepdim = bool(args[1] if len(args) > 1 else kwargs.get("keepdim", False))
            if isinstance(dims, int):
                dims = [dims]
        nz = x != 0
        if dims is not None and len(dims) == 0:
            r = nz
        else:
            pick = ~nz if is_all else nz
            cnt = pick.sum(dim=None if dims is None else list(dims), keepdim=keepdim) if dims is not None or \
                keepdim else pick.sum()
            r = cnt == 0 if is_all else cnt > 0
        return r.to(torch.uint8) if x.dtype == torch.uint8 else r

    return decomposition


# Euclid's algorithm takes at most this many steps on |values| below 2**(bits - 1)
# (consecutive Fibonacci numbers are the worst case: F(k) < 2**(bits-1))
def _euclid_steps(bits: int) -> int:
    a, b, k = 0, 1, 0
    while b < 2 ** (bits - 1):
        a, b, k = b, a + b, k + 1
    return k + 1


def gcd(a, b):
    """aten.gcd of integer tensors as eager's calc_gcd (|a|, |b|, then Euclid's loop
    `while a != 0: a, b = b % a, a`) unrolled to the number of steps the dtype's
    largest values need (Fibonacci bound: 11 for int8, 24 for int16, 47 for int32,
    93 for int64); elements already done keep their value. `%` is C's truncating
    remainder (fmod), as in eager's loop; abs(INT_MIN) stays INT_MIN as in eager.
    Other dtypes: NotImplemented."""
    if not (_integer(a) and _integer(b)) or a.dtype != b.dtype:
        return NotImplemented
    if a.dtype == torch.uint8:   # in int16 (uint8's own ops on the way recursed in the tracer)
        return gcd(a.to(torch.int16), b.to(torch.int16)).to(torch.uint8)
    bits = {torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64}.get(a.dtype)
    if bits is None:
        return NotImplemented
    x, y = torch.broadcast_tensors(a.abs(), b.abs())
    for _ in range(_euclid_steps(bits)):
        nz = x != 0
        safe = torch.where(nz, x, torch.ones_like(x))
        x, y = torch.where(nz, torch.fmod(y, safe), x), torch.where(nz, x, y)
    return y


def lcm(a, b):
    """aten.lcm of integer tensors as eager's calc_lcm: g = gcd(a, b), then
    `g == 0 ? 0 : abs(a / g * b)` (a / g exact, the product wrapping in the dtype).
    C++ computes `a / g * b` and abs of 8- and 16-bit integers in int (integer
    promotion) and converts the result back: so does this, in int32. Other dtypes:
    NotImplemented."""
    if not (_integer(a) and _integer(b)) or a.dtype != b.dtype:
        return NotImplemented
    if a.dtype in (torch.uint8, torch.int8, torch.int16):
        a32, b32 = a.to(torch.int32), b.to(torch.int32)
        return lcm(a32, b32).to(a.dtype)
    g = gcd(a, b)
    if g is NotImplemented:
        return NotImplemented
    zero = g == 0
    safe = torch.where(zero, torch.ones_like(g), g)
    r = (torch.div(a, safe, rounding_mode="trunc") * b).abs()
    return torch.where(zero, torch.zeros_like(r), r)


# Matrix products of int8 tensors: torch-mlir's lowering crashed on them (SIGSEGV in
# torch-to-linalg; partition._LOWERS_ONLY kept them eager islands).
INT8_PRODUCTS = ("mm.default", "bmm.default", "addmm.default", "baddbmm.default", "addbmm.default", "mv.default",
                 "addmv.default", "dot.default", "vdot.default")
# Products plus a bias that torch-mlir lowers only for floating operands (it rejects
# addmv and addbmm of integers: OpInfo addmv int64 ran as an eager island).
_FLOAT_ONLY_LOWERINGS = ("addmv", "addbmm")
_ADD_PRODUCTS = {"addmm": torch.mm, "baddbmm": torch.bmm, "addmv": torch.mv,
                 "addbmm": lambda x, y: torch.bmm(x, y).sum(0, dtype=x.dtype)}


def int8_product(op, other=None):
    """`op` (a matrix product) of int8 tensors computed in int32 and converted back to
    int8: sums of products (and alpha/beta multiples) are exact modulo 2**8 in int32,
    which wraps modulo 2**32, so the conversion, which keeps the low 8 bits, gives
    eager's wrapping int8 arithmetic. addmv / addbmm of other integer tensors (one
    dtype, integer beta / alpha) as beta * input + alpha * product in their dtype, the
    same wrapping sums (eager ignores the input where beta is 0; 0 * an integer is 0).
    A float beta / alpha of integer tensors is truncated as eager converts it to the
    dtype (_integer_scale). Other dtypes: `other` (or NotImplemented)."""
    name = op.name().split("::")[1]

    def decomposition(*args, **kwargs):
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        if ts and _integer(ts[0]) and kwargs:
            scales = {k: _integer_scale(v, ts[0].dtype) for k, v in kwargs.items()}
            if all(v is not None for v in scales.values()):
                kwargs = scales
        int_scalars = all(isinstance(v, int) and not isinstance(v, bool) for v in kwargs.values())
        if ts and all(t.dtype == torch.int8 for t in ts) and int_scalars:
            wide = [a.to(torch.int32) if isinstance(a, torch.Tensor) else a for a in args]
            if name.startswith("add"):   # beta * input + alpha * product, as the plain product
                c, a, b = wide
                out = kwargs.get("beta", 1) * c + kwargs.get("alpha", 1) * _ADD_PRODUCTS[name](a, b)
            else:
                out = op(*wide, **kwargs)
            return out.to(torch.int8)
        if name in _FLOAT_ONLY_LOWERINGS and len(ts) == 3 and len(args) == 3 and int_scalars and \
                _integer(ts[0]) and all(t.dtype == ts[0].dtype for t in ts):
            c, a, b = args
            return kwargs.get("beta", 1) * c + kwargs.get("alpha", 1) * _ADD_PRODUCTS[name](a, b)
        return NotImplemented if other is None else other(*args, **kwargs)

    return decomposition


def _integer_scale(v, dtype: torch.dtype) -> int | None:
    """beta / alpha of an integer product as eager's kernels use it: a Scalar converted to
    the dtype, a float truncated toward zero (addmv(c, a, b, beta=0.6, alpha=2.9) of int16
    tensors: 0 * c + 2 * (a @ b); OpInfo addbmm int16 ran through torch, torch-mlir rejects
    float scales of integers). None where the conversion is not that (a float outside the
    dtype's range raises in eager: the op stays whole) or `v` is not a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int):
        return v
    info = torch.iinfo(dtype)
    return int(v) if math.isfinite(v) and info.min <= v <= info.max else None


def scalar_shift(op, left: bool):
    """`a << n` / `a >> n` of an integer tensor by a Python int (the .Scalar /
    .Tensor_Scalar overloads): eager wraps n into a's dtype (int8 << 257 shifts by 1)
    and, for an amount outside [0, bits), gives 0 (left) or the sign fill (right:
    a >> bits - 1, 0 for uint8); torch-mlir emitted the shift as it is, and an LLVM
    shift by the width or more is poison (a << 70 returned stack garbage). The amount
    is settled here, the op keeps the in-range ones."""

    def decomposition(a, b):
        if not _integer(a) or not isinstance(b, int) or isinstance(b, bool):
            return NotImplemented
        info = torch.iinfo(a.dtype)
        bits = info.bits
        n = (b - info.min) % (info.max - info.min + 1) + info.min   # wrapped as eager converts it
        if 0 <= n < bits:
            return NotImplemented if n == b else op(a, n)   # (op(a, n) comes back here: NotImplemented)
        if left or info.min == 0:
            return aten.mul.Tensor(a, 0)
        return op(a, bits - 1)

    return decomposition


_SHIFTING = threading.local()


def tensor_shift(left: bool):
    """`a << b` / `a >> b` with a tensor amount (the .Tensor and .Scalar_Tensor
    overloads, __lshift__/__rshift__ too): eager (BinaryOpsKernel.cpp, and CUDA's) computes
    in the promoted dtype and gives, for an amount outside [0, bits), 0 (left) or the sign
    fill (right: a >> bits - 1, -1 or 0). torch-mlir emitted arith.shli/shrsi of the
    amount as it is, poison in LLVM for such amounts (int8 `a << 9` gave a << 1, int64
    `-1 >> 200` gave 0: OpInfo bitwise_left_shift int8, a wrong result). Here the
    amount is clamped into range and the out-of-range elements selected."""

    def decomposition(a, b):
        tensors = [x for x in (a, b) if isinstance(x, torch.Tensor)]
        if getattr(_SHIFTING, "on", False) or not tensors:
            return NotImplemented
        dtype = torch.result_type(a, b)
        if dtype == torch.bool or dtype.is_floating_point or dtype.is_complex:
            return NotImplemented
        dev = tensors[0].device
        a, b = (x.to(dtype) if isinstance(x, torch.Tensor) else torch.scalar_tensor(x, dtype=dtype, device=dev)
                for x in (a, b))
        bits = torch.iinfo(dtype).bits
        outside = (b < 0) | (b >= bits)
        n = b.clamp(0, bits - 1)
        _SHIFTING.on = True
        try:
            if left:
                return torch.where(outside, torch.zeros_like(a), torch.bitwise_left_shift(a, n))
            fill = torch.where(a < 0, -1, 0).to(dtype) if dtype.is_signed else torch.zeros_like(a)
            return torch.where(outside, fill, torch.bitwise_right_shift(a, n))
        finally:
            _SHIFTING.on = False

    return decomposition


def integer_pow(fallback):
    """aten.pow of integer tensors (a tensor exponent) as eager's powi: square and
    multiply over the exponent's bits (`while b: if b & 1: r *= a; b /= 2; a *= a`),
    the products wrapping in the result's dtype; a negative exponent gives 1 for a
    base of 1, +-1 for -1 (by the exponent's parity) and 0 otherwise. torch-mlir has
    no lowering for it. Anything else (floats, a Python number exponent) to `fallback`."""

    def decomposition(a, b, *args, **kwargs):
        if not args and not kwargs and isinstance(b, torch.Tensor) and b.dtype == torch.bool and \
                torch.result_type(a, b).is_floating_point:
            # a bool exponent as the result's dtype: torch-mlir folds a constant 0-d one into
            # pow.Tensor_Scalar reading the i1 signed (True as -1: `x ** torch.tensor(True)` gave
            # 1 / x; bench/fuzz_graphs.py --families modules seed 1988)
            return aten.pow.Tensor_Tensor(a, b.to(torch.result_type(a, b))) if isinstance(a, torch.Tensor) \
                else aten.pow.Scalar(a, b.to(torch.result_type(a, b)))
        if args or kwargs or not isinstance(b, torch.Tensor) or not (
                _integer(a) or isinstance(a, int) and not isinstance(a, bool)):
            return NotImplemented if fallback is None else fallback(a, b, *args, **kwargs)
        dt = torch.result_type(a, b)
        if not _integer(b) or dt in (torch.bool,) or dt.is_floating_point or dt.is_complex:
            return NotImplemented if fallback is None else fallback(a, b, *args, **kwargs)
        if dt == torch.uint8:   # in int16, wrapped back (uint8's own ops recursed in the tracer)
            # each operand as the result's dtype first, as eager converts it: a 0-d int32
            # exponent -3 is 253 (`u8 ** torch.tensor(-3)`: 3 ** 253 = 19 where it gave 0)
            a16 = a.to(torch.uint8).to(torch.int16) if isinstance(a, torch.Tensor) else a
            return decomposition(a16, b.to(torch.uint8).to(torch.int16)).to(torch.uint8)
        x = a.to(dt) if isinstance(a, torch.Tensor) else torch.full_like(b, a, dtype=dt)
        e = b.to(dt)
        x, e = torch.broadcast_tensors(x, e)
        bits = torch.iinfo(dt).bits - 1
        if b.dtype == torch.uint8:
            bits = 8
        pos = torch.where(e < 0, torch.zeros_like(e), e)
        r = torch.ones_like(x)
        for k in range(bits):
            r = torch.where(torch.bitwise_and(pos, 1 << k) != 0, r * x, r)
            if k + 1 < bits:
                x = x * x
        base = a.to(dt) if isinstance(a, torch.Tensor) else torch.full_like(b, a, dtype=dt)
        base = base.expand_as(r)
        odd = torch.bitwise_and(e, 1) != 0
        minus_one = torch.where(odd, torch.full_like(r, -1), torch.ones_like(r))
        neg = torch.where(base == 1, torch.ones_like(r), torch.where(base == -1, minus_one, torch.zeros_like(r)))
        return torch.where(e < 0, neg, r)

    return decomposition


def integer_pow_scalar(fallback):
    """aten.pow.Tensor_Scalar of an integer tensor and a non-negative Python int (`ids ** 2`,
    `torch.pow(a, 3)`): torch-mlir lowered it with a float compare on the integers (rejected: the
    op ran through torch, an island in the graph). Square and multiply over the exponent's bits,
    unrolled (the products wrap in the dtype as eager's powi; uint8 in int16, wrapped back);
    ** 0 is ones. A negative exponent (eager raises), a float one and anything else: `fallback`."""

    def decomposition(a, b, *args, **kwargs):
        if isinstance(a, torch.Tensor) and a.dtype == torch.bool and not args and not kwargs and \
                isinstance(b, (int, float)) and b >= 0:
            # a bool base (torch.square of a bool tensor): eager computes in the result's dtype
            # (int64 for an int exponent, the default float dtype for a float one; torch-mlir
            # rejected the bool op); a bool exponent keeps bool: a ** True is a, a ** False 1
            dt = torch.result_type(a, b)
            if dt == torch.bool:
                return aten.clone.default(a) if b else aten.ones_like.default(a)
            x = aten._to_copy.default(a, dtype=dt)
            out = decomposition(x, b)
            return aten.pow.Tensor_Scalar(x, b) if out is NotImplemented else out
        if args or kwargs or not _integer(a) or not isinstance(b, int) or isinstance(b, bool) or b < 0:
            return NotImplemented if fallback is None else fallback(a, b, *args, **kwargs)
        if a.dtype == torch.uint8:
            return decomposition(a.to(torch.int16), b).to(torch.uint8)
        r, x = None, a
        while b:
            if b & 1:
                r = x if r is None else r * x
            b >>= 1
            if b:
                x = x * x
        return torch.ones_like(a) if r is None else r.clone() if r is a else r

    return decomposition


def narrow_int_conversions(gm):
    """gm with every conversion of a float tensor to int8 / int16 made through int32, as
    eager's conversion is (a float out of the narrow range wraps: -153.0 to int8 is 103; a
    direct fptosi to i8 is poison in LLVM for such values, and the compiled code gave -128).
    On CUDA too: eager's static_cast converts to int32 with saturation (cvt.rzi.s32: 200.0
    to int8 is -56, 1e10 is -1, NaN 0), which the NVPTX fptosi to i32 does; with a direct
    i8 conversion LLVM folded `q.to(torch.int8).float()` to the rounded float itself (300.0
    where eager's wrapped value is 44.0). gm is changed in place; returns whether anything
    changed."""
    prims = torch.ops.prims
    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or not n.args or not isinstance(n.args[0], torch.fx.Node):
            continue
        if n.target is prims.convert_element_type.default:
            dtype = n.args[1] if len(n.args) > 1 else n.kwargs.get("dtype")
        elif n.target is aten._to_copy.default:
            dtype = n.kwargs.get("dtype")
        else:
            continue
        x = n.args[0].meta.get("val")
        if dtype not in (torch.int8, torch.int16) or not isinstance(x, torch.Tensor) or \
                not x.is_floating_point():
            continue
        with gm.graph.inserting_before(n):
            wide = gm.graph.call_function(prims.convert_element_type.default, (n.args[0], torch.int32))
        mode = getattr(x, "fake_mode", None)
        with mode if mode is not None else contextlib.nullcontext():
            wide.meta["val"] = torch.empty_strided(x.shape, x.stride(), dtype=torch.int32, device=x.device)
        n.args = (wide,) + tuple(n.args[1:])
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return changed
