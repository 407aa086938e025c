"""linspace/logspace in the dtypes whose eager CPU kernels round their own way.

torch-mlir's decompositions compute linspace/logspace in float and convert once;
eager's CPU kernels (RangeFactoriesKernel.cpp: linspace; RangeFactories.cpp:
logspace) do not, so integer and bfloat16/float16 linspace and low-precision
logspace ran through torch (partition.EAGER_NUMERICS). Here:

* a call whose endpoints are Python numbers has a value known when the graph is
  traced: it is evaluated then, by eager's own kernel on the call's device (CPU or
  CUDA), and becomes a constant of the graph on that device (constant folding; only
  up to _FOLD_MAX elements);
* bfloat16/float16 with tensor endpoints (linspace.Tensor_Tensor & co.) follow
  eager's steps, each rounded to the dtype where eager's c10::BFloat16/Half
  arithmetic rounds:
      linspace: step = ((end - start) rounded) / ((steps - 1) rounded), rounded;
                element i < steps // 2: start + (step * i~ rounded), rounded
                element i >= steps // 2: end - (step * (steps - i - 1)~ rounded), rounded
                (i~: the index converted to the dtype)
      logspace: the exponent in double from the endpoints rounded to the dtype, and
                (end - start) rounded; pow(base, exponent) in double, converted to
                float32 and then to the dtype (eager's double -> BFloat16 conversion
                goes through float); one step: pow(base, start), start not rounded.
  Integer dtypes with tensor endpoints (their kernel computes `start + step * i` with a
  fused multiply-add in double and truncates) stay whole here and are rewritten with
  an error flag on the CPU (`integer_linspace_rewrite`, from bounds.py; see below).

Tensor endpoints: CPU only, but for bfloat16/float16 linspace, whose CUDA kernel takes the
same steps in the same c10 arithmetic; eager's other CUDA kernels compute otherwise (single
precision steps and exponents, contracted multiply-adds, powf: partition._CUDA_EAGER_NUMERICS),
so there those calls stay eager islands.
"""
from __future__ import annotations

import torch
from .target import device_type

_FOLD_MAX = 1 << 14
_LOW = (torch.bfloat16, torch.float16)
# the dtypes handled here; float32/float64 keep torch-mlir's decompositions
_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64) + _LOW


def _kind(device, tensors) -> str:
    if device is None:
        device = tensors[0].device if tensors else torch.get_default_device()
    return device_type(device)


def _number(x) -> bool:
    return isinstance(x, (int, float, bool)) and not isinstance(x, torch.SymInt)


def _fold(op, args, kwargs, dtype, device):
    """`op(*args, **kwargs)` evaluated now by eager's kernel on `device` (the CPU's or
    CUDA's, which compute differently): a constant of the graph being traced, on that
    device, or None when it is too large."""
    steps = args[2]
    if not isinstance(steps, int) or steps > _FOLD_MAX:
        return None
    device = torch.device(device) if device is not None else torch.get_default_device()
    # uint8 and bfloat16/float16 constants held as int16 / float32 (exact) and converted
    held = {torch.uint8: torch.int16, torch.bfloat16: torch.float32, torch.float16: torch.float32}.get(dtype, dtype)
    value = _now(lambda: op(*args, **{**kwargs, "device": device}).to(held))
    return torch.ops.aten.lift_fresh_copy.default(value).to(dtype)   # a constant of the graph


def _now(fn):
    """`fn()` evaluated by eager torch while a graph is traced (a Python value)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    with unset_fake_temporarily(), disable_proxy_modes_tracing():
        return fn()


def _rounded(v: float, dtype) -> float:
    """The Python number `v` rounded to `dtype` through float32, as c10 converts it."""
    return _now(lambda: torch.tensor(float(v), dtype=torch.float64).to(torch.float32).to(dtype).item())


def _endpoint(x, dtype):
    """An endpoint as a float32 tensor holding it rounded to `dtype` (eager:
    Scalar::to<BFloat16>, through float)."""
    if isinstance(x, torch.Tensor):
        return x.reshape(()).to(torch.float32).to(dtype).to(torch.float32)
    return torch.scalar_tensor(_rounded(x, dtype), dtype=torch.float32)


def _round(x, dtype):
    return x.to(dtype).to(torch.float32)


def _linspace_low(start, end, steps, dtype, device):
    s, e = _endpoint(start, dtype), _endpoint(end, dtype)
    if steps == 1:
        return s.to(dtype).reshape(1)
    half = steps // 2
    step = _round(_round(e - s, dtype) / _rounded(steps - 1, dtype), dtype)
    i = torch.arange(steps, dtype=torch.int64, device=device)
    first = i < half
    count = torch.where(first, i, steps - i - 1).to(dtype).to(torch.float32)   # the index, rounded
    delta = _round(step * count, dtype)
    return torch.where(first, s + delta, e - delta).to(dtype)


def _logspace_low(start, end, steps, base, dtype, device):
    if steps == 1:   # eager: pow(base, start) of the start as it is, not rounded
        s = start.reshape(()) if isinstance(start, torch.Tensor) else torch.scalar_tensor(float(start))
        expo = s.to(torch.float64).reshape(1)
    else:
        s, e = _endpoint(start, dtype), _endpoint(end, dtype)
        half = steps // 2
        step = _round(e - s, dtype).to(torch.float64) / (steps - 1)
        i = torch.arange(steps, dtype=torch.int64, device=device)
        first = i < half
        count = torch.where(first, i, steps - i - 1).to(torch.float64)
        expo = torch.where(first, s.to(torch.float64) + step * count, e.to(torch.float64) - step * count)
    value = torch.pow(torch.scalar_tensor(float(base), dtype=torch.float64), expo)
    return value.to(torch.float32).to(dtype)


def _checked(start, end, steps, dtype, device, anywhere: bool = False):
    """(whether the call is on the CPU, whether the value depends on no tensor) for a
    call this module may handle, or None. With fewer than two steps only `start` is
    read. On another device only the constant fold applies (it runs that device's
    own kernel), unless `anywhere` (eager's CPU and CUDA kernels compute alike) on CUDA."""
    tensors = [x for x in (start, end) if isinstance(x, torch.Tensor)]
    if not isinstance(steps, int) or steps < 0 or any(x.numel() != 1 for x in tensors):
        return None
    used = (start,) if steps <= 1 else (start, end)
    constant = not any(isinstance(x, torch.Tensor) for x in used)
    kind = _kind(device, tensors)
    cpu = kind == "cpu"
    if not cpu and not constant and not (anywhere and kind == "cuda"):
        return None
    return cpu, constant


def _without_uint8(op, start, end, *args, **kwargs):
    """`op` again with uint8 endpoint tensors as int16 (the same values: eager reads
    them as Scalars), or None when there is none: torch's logspace decomposition
    calls linspace on the endpoints converted to the result's dtype, and the compiler
    holds no uint8 tensor that is not computed as int32 (widen.py)."""
    if not any(isinstance(x, torch.Tensor) and x.dtype == torch.uint8 for x in (start, end)):
        return None
    start, end = ((x.to(torch.int16) if isinstance(x, torch.Tensor) and x.dtype == torch.uint8 else x)
                  for x in (start, end))
    return op(start, end, *args, **kwargs)


def arange(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    """aten.arange.start_step of Python numbers that torch-mlir does not lower as eager
    computes them, else NotImplemented (torch-mlir's lowering):
    * an integer dtype and a float or bool argument: eager's kernels (CPU and CUDA) take
      the length from the numbers as they are (the call on the meta device gives it) and
      the elements as `start + step * i` in int64 of start and step truncated
      (Scalar::to<int64_t>), converted to the dtype (arange(2.1, -2.9, -1.0) in uint8:
      2, 1, 0, 255, 254). torch-mlir's lowering rounded instead, and bool arguments
      crashed it (SIGSEGV);
    * a floating dtype and a bool argument: the same call with 0/1;
    * int8 (any numbers): the same int64 form (eager's accumulate type), converted:
      torch-mlir's lowering of arange(0, 3, dtype=int8) crashed (SIGSEGV; OpInfo arange
      int8 #9, seed 2211)."""
    nums = (start, end, step)
    if all(_number(x) for x in nums) and not any(isinstance(x, bool) for x in nums):
        meta_dtype = dtype or _now(lambda: torch.arange(start, end, step, device="meta").dtype)
        if meta_dtype.is_floating_point and not arange_exact(nums, meta_dtype):
            # eager's kernel: start + step * i in the accumulate type, its vectorized part from a
            # base rounded to the dtype: not followed here. Eager's own values, now, as a
            # constant (OpInfo arange bfloat16 #15: arange(2.1, -2.9, -1.0) gave 0.09375 for
            # eager's 0.1001); too large ones run through torch (partition: 'numerics')
            try:
                n = _now(lambda: torch.arange(start, end, step, dtype=meta_dtype, device="meta").numel())
            except (RuntimeError, ValueError):
                return NotImplemented
            if n > _FOLD_MAX:
                return NotImplemented
            dev = torch.device(device) if device is not None else torch.get_default_device()
            held = torch.float32 if meta_dtype in (torch.bfloat16, torch.float16) else meta_dtype
            value = _now(lambda: torch.arange(start, end, step, dtype=meta_dtype, device=dev).to(held))
            return torch.ops.aten.lift_fresh_copy.default(value).to(meta_dtype)
    if not all(_number(x) for x in nums) or not (any(isinstance(x, (bool, float)) for x in nums)
                                                  or dtype == torch.int8):
        return NotImplemented
    try:
        meta = _now(lambda: torch.arange(start, end, step, dtype=dtype, device="meta"))
    except (RuntimeError, ValueError):   # (the meta kernel rejects a step truncated to 0)
        return NotImplemented
    if meta.dtype.is_floating_point:
        if not any(isinstance(x, bool) for x in nums):
            return NotImplemented
        return torch.arange(*(int(x) if isinstance(x, bool) else x for x in nums), dtype=meta.dtype, device=device)
    if meta.dtype == torch.bool or meta.dtype.is_complex:
        return NotImplemented
    i = torch.arange(meta.numel(), dtype=torch.int64, device=device)
    return (i * int(step) + int(start)).to(meta.dtype)


# the integers each floating dtype holds exactly, every one up to this magnitude
_EXACT_INTS = {torch.float64: 2 ** 53, torch.float32: 2 ** 24, torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8}


def arange_exact(nums, dtype) -> bool:
    """Whether a floating arange of the Python numbers `nums` (start, end, step) has only
    integer values the dtype holds exactly (any way of computing them gives eager's)."""
    if dtype not in _EXACT_INTS or not all(isinstance(x, int) or isinstance(x, float) and x.is_integer()
                                           for x in nums):
        return False
    start, end, step = (int(x) for x in nums)
    return max(abs(start), abs(end)) + abs(step) <= _EXACT_INTS[dtype]


def linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    """aten.linspace (all overloads) where eager's CPU kernel can be followed, else
    NotImplemented (the op stays whole)."""
    dtype = dtype or torch.get_default_dtype()
    # bfloat16/float16: CUDA's kernel (RangeFactories.cu) takes the CPU's steps, each in
    # c10::BFloat16 / c10::Half arithmetic (a product of the step and the index converted
    # to the dtype: no multiply-add to contract), so _linspace_low is eager's there too
    checked = _checked(start, end, steps, dtype, device, anywhere=dtype in _LOW)
    if checked is None:
        return NotImplemented
    cpu, constant = checked
    if dtype not in _DTYPES:
        out = _without_uint8(torch.linspace, start, end, steps, dtype=dtype, device=device) if cpu else None
        return NotImplemented if out is None else out
    if constant:   # (with fewer than two steps `end` is not read)
        end = end if steps > 1 else 0
        folded = _fold(torch.linspace, (start, end, steps), {"dtype": dtype}, dtype, device)
        if folded is not None:
            return folded
    if dtype in _LOW and steps >= 1 and \
            _kind(device, [x for x in (start, end) if isinstance(x, torch.Tensor)]) in ("cpu", "cuda"):
        return _linspace_low(start, end, steps, dtype, device)
    return NotImplemented


def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """aten.logspace (all overloads): as `linspace`."""
    dtype = dtype or torch.get_default_dtype()
    checked = _checked(start, end, steps, dtype, device)
    if checked is None or not _number(base):
        return NotImplemented
    cpu, constant = checked
    if dtype not in _DTYPES:
        out = _without_uint8(torch.logspace, start, end, steps, base, dtype=dtype, device=device) if cpu else None
        return NotImplemented if out is None else out
    if constant:
        end = end if steps > 1 else 0
        folded = _fold(torch.logspace, (start, end, steps, base), {"dtype": dtype}, dtype, device)
        if folded is not None:
            return folded
    if cpu and dtype in _LOW and steps >= 1:
        return _logspace_low(start, end, steps, base, dtype, device)
    return NotImplemented


# --------------------------------------------------------------------------- integer linspace
# Integer linspace with tensor endpoints on the CPU, as eager's kernel computes it
# (RangeFactoriesKernel.cpp): the endpoints are read as Scalars and converted to the dtype
# (c10's checked conversion: NaN or a value outside the dtype raises; an integer Scalar
# may wrap into uint8 down to -255), then in double
#     step = (end - start) / (steps - 1)
#     element i <  steps // 2: start + step * i                 (one fused multiply-add)
#     element i >= steps // 2: end - step * (steps - i - 1)
# truncated to the dtype. Without a fused multiply-add (the compiled code has none) the
# sum is computed as p = step * j, t = c + p with their exact errors (Dekker's product of
# step, split in halves, and the index, below 2**26; Knuth's sum): where both errors are
# 0, t is the exact value and its truncation eager's. Where one is not and t lies within
# the errors (and a rounding) of an integer, truncating t might differ from truncating
# the fused result: the error flag is set and the graph reruns eagerly (bounds.py), as it
# does for an endpoint eager's conversion rejects. steps of 0 and 1: empty, [start].
_SPLIT = 134217729.0   # 2**27 + 1
_MAX_STEPS = 1 << 26


def _endpoint_in(x, dtype):
    """(the endpoint tensor converted to `dtype` as eager's Scalar conversion does, its
    value as float64, bad: eager raises), all 0-d."""
    info = torch.iinfo(dtype)
    x = x.reshape(())
    if x.dtype == torch.bool:
        v = x.to(torch.int64)
        return v.to(dtype), v.to(torch.float64), torch.zeros((), dtype=torch.bool)
    if x.is_floating_point():
        d = x.to(torch.float64)
        bad = torch.isnan(d) | (d < info.min) | (d > info.max)
        safe = torch.where(bad, torch.zeros_like(d), torch.trunc(d))
        v = safe.to(torch.int64)
    else:
        v = x.to(torch.int64)
        low = -info.max if dtype == torch.uint8 else info.min
        bad = (v < low) | (v > info.max)
        v = torch.where(bad, torch.zeros_like(v), v)
        if dtype == torch.uint8:
            v = torch.bitwise_and(v, 255)
    if dtype == torch.int64:
        bad = bad | (v.abs() > (1 << 53))   # (and |start|, |end| past 2**53: eager's own rounding)
    return v.to(dtype), v.to(torch.float64), bad


def _two_sum(a, b):
    s = a + b
    bv = s - a
    av = s - bv
    return s, (a - av) + (b - bv)


def _fused(c, a, j):
    """(t, exact): t = c + a * j rounded twice, exact where it equals c + a * j (j an
    integer-valued float64 below 2**26)."""
    g = a * _SPLIT
    ah = g - (g - a)
    al = a - ah
    p = a * j
    err = (ah * j - p) + al * j
    t, et = _two_sum(c, p)
    return t, (err == 0) & (et == 0), err.abs() + et.abs()


def _integer_linspace(steps: int, dtype, start_const, end_const):
    def fn(*tensors):
        it = iter(tensors)
        ends = []
        for const in (start_const, end_const):
            if const is None:
                ends.append(_endpoint_in(next(it), dtype))
            else:   # (made here: a tensor constant would be an attribute of the traced graph)
                ends.append((torch.full((), const, dtype=dtype), torch.full((), float(const), dtype=torch.float64),
                             torch.zeros((), dtype=torch.bool)))
        (s_t, s, s_bad), (e_t, e, e_bad) = ends
        if steps == 1:
            return s_t.reshape(1), s_bad
        step = (e - s) / float(steps - 1)
        half = steps // 2
        i = torch.arange(steps, dtype=torch.float64)
        first = i < half
        j = torch.where(first, i, float(steps - 1) - i)
        c = torch.where(first, s, e)
        a = torch.where(first, step, -step)
        t, exact, err = _fused(c, a, j)
        n = torch.round(t)
        margin = err + t.abs() * (2.0 ** -51)
        unsure = ~exact & ((t - n).abs() <= margin)
        out = torch.trunc(t).to(dtype)
        return out, s_bad | e_bad | unsure.any()
    return fn


def _constant_endpoint(x, dtype):
    """A Python number endpoint converted as _endpoint_in converts a tensor's value (an
    int), or None where eager's conversion raises (left to eager)."""
    info = torch.iinfo(dtype)
    if isinstance(x, bool):
        x = int(x)
    if isinstance(x, float):
        if x != x or x < info.min or x > info.max:
            return None
        v = int(x)
    elif isinstance(x, int):
        if x > info.max or x < (-info.max if dtype == torch.uint8 else info.min):
            return None
        v = x & 255 if dtype == torch.uint8 else x
    else:
        return None
    if dtype == torch.int64 and abs(v) > (1 << 53):
        return None
    return v


def integer_linspace_rewrite(graph, node):
    """aten.linspace of integer dtype with tensor endpoints on the CPU (bounds.py): replaced
    by the computation above traced into `graph`; its error flag, or None (left as it is)."""
    import torch.fx as fx

    from .polynomials import inline

    want = node.meta.get("val")
    if not isinstance(want, torch.Tensor) or device_type(want) != "cpu" or want.dtype not in _DTYPES[:5]:
        return None
    args = list(node.args)
    if len(args) != 3 or not isinstance(args[2], int) or not 1 <= args[2] <= _MAX_STEPS:
        return None
    inputs, consts = [], []
    for x in args[:2]:
        if isinstance(x, fx.Node):
            v = x.meta.get("val")
            if not isinstance(v, torch.Tensor) or v.numel() != 1 or v.is_complex():
                return None
            inputs.append(x)
            consts.append(None)
        else:
            c = _constant_endpoint(x, want.dtype)
            if c is None:
                return None
            consts.append(c)
    if not inputs:
        return None
    return inline(graph, node, _integer_linspace(args[2], want.dtype, *consts), inputs)
