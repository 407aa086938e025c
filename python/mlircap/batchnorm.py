"""bfloat16/float16 batch norm (and instance norm, built on it) as eager's CPU kernel rounds it.

torch's decomposition of batch norm computes everything in float32 and rounds the
results once. Eager's CPU kernel (ATen/native/Normalization.cpp, cpu/batch_norm_kernel.cpp)
does not: with parameters in the input's dtype ("not mixed") it stores the batch mean,
the sum of squared deviations and the inverse standard deviation in that dtype, and
updates the running statistics in c10::BFloat16/Half arithmetic, where every operation
rounds. The output is then `x * alpha + beta` in float32 from the *rounded* mean and
inverse std, so a compiled output differed from eager's wherever `x` is close to the
mean (OpInfo: F.batch_norm/instance_norm bf16 up to 0.03 off, 138 of 360 elements of a
(3, 4, 5, 6) instance norm), and the running statistics drifted by one ulp per call.

`eager_cpu` reproduces eager's rounding steps (each op below names the C++ expression
it mirrors); the sums themselves run in float32 in the compiler's order, as eager's
vectorized ones do in theirs. Which steps round depends on the same things eager's
kernel selection depends on, all known when the graph is traced:
* mixed types (bf16 input with float32 parameters): statistics stay float32;
* the layout: a contiguous or channels-last input takes the vectorized kernels, whose
  variance is centred on the float32 mean (contiguous, image size > 1) or on the
  rounded mean (channels-last, or an image of one element); any other layout computes the mean with at::mean, the variance in float32 unrounded, and the
  running statistics in double;
* the output transform: all contiguous takes `x * alpha + beta` in float32, otherwise
  `((x - mean) * invstd) * weight + bias` in the parameters' arithmetic.
Inference (running statistics) follows the same two transforms. On other devices and
dtypes the table's decomposition runs as before.
"""
from __future__ import annotations

import struct

import torch
from .target import device_type

aten = torch.ops.aten
LOW = (torch.bfloat16, torch.float16)
F32, F64 = torch.float32, torch.float64


def round_scalar(v: float, dtype: torch.dtype) -> float:
    """`static_cast<dtype>(v)` of a C++ double (through float, as c10 converts it)."""
    f = struct.unpack("<f", struct.pack("<f", float(v)))[0]
    if dtype == torch.float32:
        return f
    if dtype == torch.float16:
        import numpy as np

        return float(np.float16(np.float32(f)))
    bits = struct.unpack("<I", struct.pack("<f", f))[0]
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _f32_sub(a: float, b: float) -> float:
    """a - b in float32 arithmetic (both float32 values)."""
    import numpy as np

    return float(np.float32(a) - np.float32(b))


def _contiguous_any(t: torch.Tensor) -> bool:
    """ATen's is_contiguous in Normalization.cpp: contiguous or channels-last (3d)."""
    if t.is_contiguous():
        return True
    return (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)) or (
        t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d))


def _suggests_channels_last(t: torch.Tensor) -> bool:
    from torch._prims_common import suggest_memory_format

    return suggest_memory_format(t) != torch.contiguous_format


def _contracts() -> bool:
    """Whether eager's vectorized CPU kernels fuse a * b + c (built for AVX2 or later with
    -ffp-contract: all but the DEFAULT capability)."""
    return torch.backends.cpu.get_cpu_capability() != "DEFAULT"


def eager_cpu(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """(out, save_mean, save_invstd, new_running_mean, new_running_var) as eager's CPU
    batch_norm computes them for a bfloat16/float16 input, or NotImplemented where
    it does not apply (other dtypes and devices, inputs eager rejects)."""
    if not isinstance(input, torch.Tensor) or input.dtype not in LOW or device_type(input) != "cpu" \
            or input.dim() < 2 or input.numel() == 0:
        return NotImplemented
    low = input.dtype
    params = [t for t in (weight, bias, running_mean, running_var) if t is not None]
    pdt = params[0].dtype if params else low
    if any(t.dtype != pdt or t.dim() != 1 or t.device != input.device for t in params) or pdt not in (low, F32):
        return NotImplemented
    if not training and (running_mean is None or running_var is None):
        return NotImplemented
    mixed = pdt != low
    # float16 (measured against torch 2.13's kernel): statistics in float32 as with
    # float32 parameters, stored once in float16; bfloat16 rounds each step
    fstats = mixed or low == torch.float16
    c = input.shape[1]
    n = input.numel() // c
    dims = [0] + list(range(2, input.dim()))
    bshape = [1, c] + [1] * (input.dim() - 2)

    def col(t):   # a per-channel float32 vector, broadcast over the input
        return t.to(F32).reshape(bshape)

    def rnd(t):   # a c10::BFloat16/Half operation's result: rounded to the input's dtype
        return t.to(low).to(F32)

    def par(t):   # stored as param_t (the input's dtype, or float32 when mixed)
        return t if mixed else rnd(t)

    def spar(t):  # a statistic stored as param_t while it is computed
        return t if fstats else rnd(t)

    def out_dtype(t):   # float32 -> param_t, as a C++ float is assigned to it
        return t.to(F32).to(pdt)

    x = input.to(F32)
    new_rm, new_rv = running_mean, running_var
    stats_contiguous = _contiguous_any(input)
    transform_contiguous = stats_contiguous and all(
        t.is_contiguous() for t in (weight, bias, running_mean, running_var) if t is not None)
    if training:
        if stats_contiguous:
            # batch_norm_cpu_collect_stats_{contiguous,channels_last}_internal
            mean_f = x.sum(dims) / n                       # opmath sum / N
            mean_p = spar(mean_f)                          # mean_data[c] = param_t(...)
            image = n // input.shape[0]
            if not _suggests_channels_last(input) and image != 1:
                d = x - col(mean_f)                        # centred on the float mean
                var_f = (d * d).sum(dims)
            else:
                d = x - col(mean_p)                        # float buffer, rounded mean
                var_f = (d * d).sum(dims)
            var_sum = spar(var_f)                          # var_sum_data[c] = param_t(...)
            # batch_norm_cpu_update_stats_template, contiguous: VarTransform(_var_sum / n)
            if fstats:
                var = var_sum / n
            else:
                var = rnd(var_sum / round_scalar(n, low))  # BFloat16 / int64_t
        else:
            # non-contiguous: save_mean = at::mean(input) (float sum / n, stored),
            # var_sum in float around it, never rounded
            mean_p = par(x.sum(dims) / n)
            d = x - col(mean_p)
            var_sum = (d * d).sum(dims)
            var = var_sum / n
        # InvStd<float>: 1 / std::sqrt(var + (double)eps) in double, stored as float
        inv = (1.0 / torch.sqrt(var.to(F64) + eps)).to(F32)
        if eps == 0:
            inv = torch.where(var == 0, torch.zeros_like(inv), inv)
        save_mean, save_invstd = par(mean_p), par(inv)
        if stats_contiguous:
            if fstats:
                m = round_scalar(momentum, F32)
                om = _f32_sub(1.0, m)
                if running_mean is not None:
                    new_rm = (mean_p * m + running_mean.to(F32) * om).to(pdt)
                if running_var is not None:
                    new_rv = ((var_sum / (n - 1)) * m + running_var.to(F32) * om).to(pdt)
            else:
                m = round_scalar(momentum, low)            # static_cast<param_t>(momentum)
                om = round_scalar(1.0 - m, low)            # 1 - momentum_ (BFloat16)
                if running_mean is not None:               # all BFloat16 operations
                    new_rm = rnd(rnd(mean_p * m) + rnd(running_mean.to(F32) * om)).to(low)
                if running_var is not None:
                    unbiased = rnd(var_sum / round_scalar(n - 1, low))
                    # BFloat16 * float is float; + BFloat16 is float; stored rounded
                    new_rv = (unbiased * m + rnd(running_var.to(F32) * om)).to(low)
        else:
            # double momentum, float statistics: double arithmetic, stored through float
            if running_mean is not None:
                new_rm = out_dtype(mean_p.to(F64) * momentum + running_mean.to(F64) * (1 - momentum))
            if running_var is not None:
                unbiased = var_sum / (n - 1)
                new_rv = out_dtype(unbiased.to(F64) * momentum + running_var.to(F64) * (1 - momentum))
        mean_c, invstd_c = col(save_mean), col(save_invstd)
    else:
        save_mean = save_invstd = input.new_zeros((0,), dtype=pdt)
        mean_c = col(running_mean)
        if transform_contiguous:
            # 1 / std::sqrt(running_var + (opmath_t)eps), in float
            invstd_c = 1.0 / torch.sqrt(col(running_var) + round_scalar(eps, F32))
        else:
            # 1 / at::sqrt(running_var + eps): tensor operations in param_t
            invstd_c = par(1.0 / par(torch.sqrt(par(col(running_var) + round_scalar(eps, F32)))))
    if transform_contiguous:
        # batch_norm_cpu_collect_linear_and_constant_terms, then x * alpha + beta in float;
        # the kernel file is built for AVX2/AVX-512 with contraction: both are fused
        # multiply-adds there (a product exact in double, the sum rounded once)
        alpha = invstd_c * col(weight) if weight is not None else invstd_c
        bias_c = col(bias) if bias is not None else torch.zeros_like(alpha)
        if _contracts():
            beta = (bias_c.to(F64) - mean_c.to(F64) * alpha.to(F64)).to(F32)
            out = (x.to(F64) * alpha.to(F64) + beta.to(F64)).to(F32)
        else:
            beta = bias_c - mean_c * alpha
            out = x * alpha + beta
    else:
        # ((input - mean) * invstd) * weight + bias in param_t arithmetic
        out = par(par(x - mean_c) * invstd_c)
        if weight is not None:
            out = par(out * col(weight))
        if bias is not None:
            out = par(out + col(bias))
    if training and running_mean is None:
        new_rm = new_rv = None
    return out.to(low), save_mean.to(pdt), save_invstd.to(pdt), new_rm, new_rv


def _functional(fallback):
    def decomposition(input, weight, bias, running_mean, running_var, training, momentum, eps):
        res = eager_cpu(input, weight, bias, running_mean, running_var, training, momentum, eps)
        if res is NotImplemented:
            return NotImplemented if fallback is None else fallback(
                input, weight, bias, running_mean, running_var, training, momentum, eps)
        out, save_mean, save_invstd, new_rm, new_rv = res
        if not training:
            new_rm, new_rv = running_mean.clone(), running_var.clone()
        return out, save_mean, save_invstd, new_rm, new_rv

    return decomposition


def _in_place(fallback):
    """native_batch_norm / _native_batch_norm_legit: running statistics updated in place."""

    def decomposition(input, weight, bias, running_mean, running_var, training, momentum, eps):
        res = eager_cpu(input, weight, bias, running_mean, running_var, training, momentum, eps)
        if res is NotImplemented:
            return NotImplemented if fallback is None else fallback(
                input, weight, bias, running_mean, running_var, training, momentum, eps)
        out, save_mean, save_invstd, new_rm, new_rv = res
        if training and running_mean is not None:
            running_mean.copy_(new_rm)
            running_var.copy_(new_rv)
        return out, save_mean, save_invstd

    return decomposition


def _no_stats(fallback):
    def decomposition(input, weight, bias, training, momentum, eps):
        res = eager_cpu(input, weight, bias, None, None, training, momentum, eps)
        if res is NotImplemented:
            return NotImplemented if fallback is None else fallback(input, weight, bias, training, momentum, eps)
        return res[:3]

    return decomposition


def _no_training(fallback):
    def decomposition(input, weight, bias, running_mean, running_var, momentum, eps):
        res = eager_cpu(input, weight, bias, running_mean, running_var, False, momentum, eps)
        if res is NotImplemented:
            return NotImplemented if fallback is None else fallback(
                input, weight, bias, running_mean, running_var, momentum, eps)
        return res[:3]

    return decomposition


def _transform_as_eager(res, input, weight, bias, running_mean, running_var, training, eps):
    """float32 / float64 batch norm's output `res[0]` (torch's decomposition: `((x - mean) *
    invstd) * weight + bias`) where eager's CPU kernel gives another non-finite result: its
    contiguous transform computes `x * alpha + beta` (alpha = invstd * weight, beta = bias -
    mean * alpha, per channel), so a channel whose alpha or beta is not finite (an infinite
    weight, a mean times alpha past the range) gives `inf - inf` = NaN where the decomposition's
    form gives +-inf or a finite number (training-mode F.batch_norm with a -inf weight: NaN in
    4 of 6 elements, fuzz_graphs seed 1385). Those channels take eager's form; the others keep
    the decomposition's (it loses no digits to cancellation where the mean is large)."""
    params = [t for t in (weight, bias, running_mean, running_var) if t is not None]
    if not isinstance(input, torch.Tensor) or input.dtype not in (F32, F64) or device_type(input) != "cpu" \
            or input.dim() < 2 or input.numel() == 0 or not _contiguous_any(input) \
            or any(t.dtype != input.dtype or t.dim() != 1 or not t.is_contiguous() for t in params):
        return res
    bshape = [1, input.shape[1]] + [1] * (input.dim() - 2)
    if training:
        mean, invstd = res[1], res[2]
    elif running_mean is None or running_var is None:
        return res
    else:   # 1 / std::sqrt(running_var + (opmath_t)eps)
        mean = running_mean
        invstd = 1.0 / torch.sqrt(running_var + (round_scalar(eps, F32) if input.dtype == F32 else eps))
    alpha = invstd * weight if weight is not None else invstd
    beta = bias - mean * alpha if bias is not None else -(mean * alpha)
    finite = (torch.isfinite(alpha) & torch.isfinite(beta)).reshape(bshape)
    alpha, beta = alpha.reshape(bshape), beta.reshape(bshape)
    # a fused multiply-add where eager's kernels contract it: x * alpha exact, so a finite
    # product past the range plus an infinite beta is beta, not inf - inf
    eager = input * alpha + beta
    if _contracts():
        eager = torch.where(torch.isinf(beta) & torch.isfinite(input) & torch.isfinite(alpha), beta, eager)
    return (torch.where(finite, res[0], eager), *res[1:])


def _nonfinite_as_eager(op, fallback):
    """`fallback` (a batch norm decomposition of `op`) with _transform_as_eager on its output."""
    if fallback is None:
        return None

    def decomposition(*args, **kwargs):
        res = fallback(*args, **kwargs)
        if kwargs or res is NotImplemented:
            return res
        input, weight, bias = args[:3]
        if op is aten._native_batch_norm_legit.no_stats:
            rm = rv = None
            training, eps = args[3], args[5]
        elif op in (aten._native_batch_norm_legit_no_training.default, aten._batch_norm_no_update.default):
            rm, rv, training, eps = args[3], args[4], False, args[6]
        elif op in (aten._batch_norm_with_update.default, aten._batch_norm_with_update_functional.default):
            rm, rv, training, eps = args[3], args[4], True, args[6]
        else:
            rm, rv, training, eps = args[3], args[4], args[5], args[7]
        return _transform_as_eager(res, input, weight, bias, rm, rv, training, eps)

    return decomposition


def _reserve(input):
    """The reserve tensor of _batch_norm_with_update / _no_update: empty (cuDNN only uses it)."""
    return torch.empty(0, dtype=torch.uint8, device=input.device)


def _with_update(fallback):
    def decomposition(input, weight, bias, running_mean, running_var, momentum, eps):
        res = eager_cpu(input, weight, bias, running_mean, running_var, True, momentum, eps)
        if res is NotImplemented:
            return NotImplemented if fallback is None else fallback(
                input, weight, bias, running_mean, running_var, momentum, eps)
        out, save_mean, save_invstd, new_rm, new_rv = res
        running_mean.copy_(new_rm)
        running_var.copy_(new_rv)
        return out, save_mean, save_invstd, _reserve(input)

    return decomposition


def _with_update_functional(fallback):
    def decomposition(input, weight, bias, running_mean, running_var, momentum, eps):
        res = eager_cpu(input, weight, bias, running_mean, running_var, True, momentum, eps)
        if res is NotImplemented:
            return NotImplemented if fallback is None else fallback(
                input, weight, bias, running_mean, running_var, momentum, eps)
        out, save_mean, save_invstd, new_rm, new_rv = res
        return out, save_mean, save_invstd, _reserve(input), new_rm, new_rv

    return decomposition


def _no_update(fallback):
    def decomposition(input, weight, bias, running_mean, running_var, momentum, eps):
        res = eager_cpu(input, weight, bias, running_mean, running_var, False, momentum, eps)
        if res is NotImplemented:
            return NotImplemented if fallback is None else fallback(
                input, weight, bias, running_mean, running_var, momentum, eps)
        return (*res[:3], _reserve(input))

    return decomposition


def _layer_norm(fallback):
    """native_layer_norm of a bfloat16/float16 input on the CPU as eager's mixed-type kernel
    (cpu/layer_norm_kernel.cpp) computes it: mean and rstd in float, then
    `(x * rstd + (-rstd * mean)) * gamma + beta` in float, each multiply-add fused where
    the kernels contract (_contracts: a product exact in double, the sum rounded once).
    torch's decomposition computes `(x - mean) * rstd`: where x equals the mean (a row
    of one element, a constant row) eager's result is the rounding error of
    `-rstd * mean`, not 0 (OpInfo native_layer_norm bf16 #10, #11: 1.2e-4 and 1e-3
    against 0). float32 on the CPU: _layer_norm_f32 (no fused form in its kernel); other
    devices: `fallback`."""

    def decomposition(input, normalized_shape, weight, bias, eps):
        params = [t for t in (weight, bias) if t is not None]
        if isinstance(input, torch.Tensor) and input.dtype == F32 and device_type(input) == "cpu" \
                and input.numel() > 0 and all(t.dtype == F32 and t.device == input.device for t in params):
            return _layer_norm_f32(input, normalized_shape, weight, bias, eps)
        if not isinstance(input, torch.Tensor) or input.dtype not in LOW or device_type(input) != "cpu" \
                or input.numel() == 0 or not _contracts() \
                or any(t.dtype != input.dtype or t.device != input.device for t in params):
            return NotImplemented if fallback is None else fallback(input, normalized_shape, weight, bias, eps)
        low = input.dtype
        dims = list(range(input.dim() - len(normalized_shape), input.dim()))
        x = input.contiguous().to(F32)   # (eager's layout: see _layer_norm_f32)
        mean = x.mean(dims, keepdim=True)
        rstd = torch.rsqrt((x - mean).square().mean(dims, keepdim=True) + round_scalar(eps, F32))
        shift = -rstd * mean   # const float bias = -rstd_val * mean_val
        out = (x.to(F64) * rstd.to(F64) + shift.to(F64)).to(F32)
        if weight is not None or bias is not None:
            g = weight.to(F64) if weight is not None else 1.0
            b = bias.to(F64) if bias is not None else 0.0
            out = (out.to(F64) * g + b).to(F32)
        return out.to(low), mean.to(low), rstd.to(low)

    return decomposition


def _layer_norm_f32(input, normalized_shape, weight, bias, eps):
    """native_layer_norm of a float32 input on the CPU: torch's decomposition, its mean
    and variance in float as eager's kernel (cpu/layer_norm_kernel.cpp, RowwiseMoments)
    accumulates them, not in var_mean's double (half the vector width on the CPU, and
    one more pass over the row: torch-mlir's var_mean sums the row in double for the
    variance and again in float for the mean). Two passes, the variance over
    `mean - x`: mlircap-widen-sums makes both sums blocked sums (blocks of 1024 in
    float, the blocks' sums in double). The output is `(x - mean) * rstd` as in torch's
    decomposition (eager's `x * rstd + (-rstd * mean)` loses digits to cancellation
    where the mean is large against the spread); `mean - x` and `x - mean` stay two
    ops (CSE would merge one value read twice, written out as a whole tensor), each
    fused into its pass. The mean is corrected by the mean deviation from it (below).
    Output, mean and rstd within 2x of eager's error against a float64 LayerNorm
    (test_cpu_reductions.py::test_layer_norm_f32_as_accurate_as_eager)."""
    # (eager's kernel computes on input.contiguous() and returns a contiguous output: laid out as
    # a transposed input, the output's strides differed from eager's, and a dropout after it drew
    # its mask in another memory order, other elements dropped (conv -> flatten -> transpose ->
    # LayerNorm -> Dropout, a ViT / Swin patch embedding in training))
    input = input.contiguous()
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    first = input.mean(dims, keepdim=True)
    # The variance pass also sums the deviations from the first mean: their mean `d` is
    # the first mean's rounding error (about an ulp of the mean for rows far from 0), so
    # `first + d` is the mean to half an ulp and `mean((first - x)^2) - d^2` the variance
    # about it (the corrected two-pass algorithm), at no extra pass over the row.
    d = (input - first).mean(dims, keepdim=True)
    var = (first - input).square().mean(dims, keepdim=True) - d.square()
    mean = first + d
    rstd = torch.rsqrt(var + eps)
    out = (input - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def install(table: dict) -> None:
    """Puts the decompositions into `table` (op -> decomposition), each falling back to
    the entry it replaces (or torch's decomposition of the op: torch-mlir's table has
    none for _batch_norm_with_update / _no_update, which then ran as eager islands)."""
    from torch._decomp import get_decompositions

    ops = ((aten._native_batch_norm_legit_functional.default, _functional),
           (aten._native_batch_norm_legit.default, _in_place),
           (aten.native_batch_norm.default, _in_place),
           (aten._native_batch_norm_legit.no_stats, _no_stats),
           (aten._native_batch_norm_legit_no_training.default, _no_training),
           (aten._batch_norm_with_update.default, _with_update),
           (aten._batch_norm_with_update_functional.default, _with_update_functional),
           (aten._batch_norm_no_update.default, _no_update))
    torch_table = get_decompositions([op for op, _ in ops])
    for op, wrap in ops:
        table[op] = wrap(_nonfinite_as_eager(op, table.get(op, torch_table.get(op))))
    table[aten.native_layer_norm.default] = _layer_norm(table.get(aten.native_layer_norm.default))
