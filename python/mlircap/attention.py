"""Hand-written attention as one fused attention call (an FX rewrite of aten graphs).

Programs that write attention out by hand,

    scores = q @ k.transpose(-2, -1) * scale      # or / sqrt(d)
    scores = scores + mask                        # optional; or masked_fill / where
    p = softmax(scores, -1)                       # optionally in float32, cast back
    p = dropout(p)                                # in eval: nothing, or a clone
    out = p @ v

reach the backend as bmm + pointwise + softmax + bmm, materializing the
[batch, heads, L, S] scores. :func:`fuse_attention` finds that subgraph in an
aot_autograd forward graph (after the decomposition table) and replaces it by
the fused attention kernel torch itself would run for
``F.scaled_dot_product_attention(q, k, v, attn_mask=M, scale=scale)``: flash or
memory-efficient attention on CUDA, flash attention on the CPU. Those kernels
are library steps (partition._LIBRARY_OPS) that run through torch inside the
compiled plan. The kernel is chosen as torch chooses it (its sdp_utils checks
of dtype, head dims, mask, strides and alignment) by tracing that call with
make_fx on the graph's fake tensors, with only the flash and memory-efficient
backends enabled; when neither applies nothing is rewritten.

The match is made on values, not on one fixed sequence of nodes:
* the scores are the path from a bmm to the softmax along which every node has
  one user (found from the softmax's input back); on it: views (any row-major
  reinterpretation: view, unsqueeze, permutes of size-1 dims as einsum makes),
  clones, casts, multiplication or division by a constant scalar (a Python
  number or a tensor computed from constants only), additions of a mask tensor
  (either operand; baddbmm's zeros add nothing), and where / masked_fill with a
  constant fill of -inf or at most -1e4; these fold into one additive mask
  ``M`` and one ``scale``. A where(cond, 0, -inf) float32 mask of bf16 scores is
  built again in bf16 (exact);
* softmax is _softmax or _safe_softmax, or _softmax followed by _safe_softmax's
  decomposition (SDPA's math variant); after it: casts, clones (dropout in
  eval) and views up to the second bmm;
* q, k and v are read through the views, clones, same-shape expands and scalar
  factors (SDPA's sqrt(scale) on q and k) around the bmms: the deepest tensor of
  the [*batch, L, E] shape, so no copy of q, k or v remains; k^T that is a
  transpose of the last two dims is read as k. q, k and v of different float
  dtypes run in the widest (exact widening); the result is cast to the second
  bmm's dtype.

Soundness: every node from the first bmm to the second has no other user (the
scores and the softmax are not saved for backward nor returned; training
graphs with dropout keep their random op and never match), a mask is exact in
the dtype the kernel runs in (no float32 mask rounded to bfloat16), shapes are
static and no step broadcasts the scores up; the result is contiguous, as the
bmm's was. Numerics: the fused kernels do not round the scores or probabilities
to the input dtype, so bfloat16/float16 results differ from eager's within their
tolerance, usually closer to the exact result (as inductor's fuse_attention);
float32 agrees to rounding. Rows whose every entry is masked (which causal and
padding masks never make): with a finite fill eager gives the row's uniform
average, the fused kernel softmax(s + fill), the same when the fill absorbs the
scores in float32 (-1e9, finfo.min; checked on the CPU kernel) but not for a
fill like -1e4; with -inf eager gives NaN where the fused kernels give 0.
On the CPU, float32 attention is fused only from 256K score elements (below,
mlircap's own bmm + softmax + bmm is as fast), bfloat16/float16 from 4M
(_CPU_MIN_SCORES, _CPU_MIN_SCORES_LOW_PRECISION); MLIRCAP_FUSE_ATTENTION=0 turns
the rewrite off, =force fuses at any size.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from . import config, logs
from .attention_masks import MASKED_MAX
from .target import device_type

aten = torch.ops.aten
prims = torch.ops.prims

_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_SOFTMAX = {aten._softmax.default, aten._safe_softmax.default}
_BMM = aten.bmm.default
_UNSQUEEZE = {aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default}
# Fill values of where / masked_fill that count as "masked out" (attention_masks.py)
_MASKED_FILL_MAX = MASKED_MAX


# On the CPU torch's flash kernel beats mlircap's bmm + softmax (a library call
# there too) + bmm for float32 only on larger scores. Measured on 1 thread, process
# CPU time (SelfAttention, head dim 32), fused vs not: float32 2x4x16x16 0.89x,
# 2x4x64x64 0.98x, 4x4x128x128 1.11x, 8x8x128x128 1.08x; bfloat16 1.10x, 1.43x,
# 1.86x (2x4x16x16, 2x4x64x64, 4x4x128x128). So float32/float64 from 256K score
# elements, bfloat16/float16 always. CUDA has no floor (a split graph replays as one
# CUDA graph). MLIRCAP_FUSE_ATTENTION=force fuses at any size.
# Since softmax compiles (and bf16 library products skip their float32 conversions),
# bfloat16 unfused beats the flash kernel at every size measured (1 thread, Zen 4,
# softmax(q k^T s) v, x eager unfused vs fused: 2x4x64x32 1.07 vs 0.94, 4x4x128x32 1.02
# vs 0.90, 8x4x77x64 1.27 vs 0.93, 4x8x128x64 1.06 vs 0.96, 2x8x256x64 1.11 vs 0.93,
# 1x8x512x64 1.05 vs 0.90): bfloat16/float16 are fused from 4M score elements, where
# the unfused path's float32 scores take 16 MB.
_CPU_MIN_SCORES = {torch.float32: 1 << 18, torch.float64: 1 << 18}
_CPU_MIN_SCORES_LOW_PRECISION = 1 << 22


def enabled() -> bool:
    return config.env_flag("MLIRCAP_FUSE_ATTENTION")


def _worth_it(device: torch.device, dtype: torch.dtype, scores: int) -> bool:
    if (config.env("MLIRCAP_FUSE_ATTENTION") or "").strip().lower() == "force":
        return True
    if device_type(device) == "cuda":
        # float32 has no flash kernel on CUDA: memory-efficient attention in float32 made
        # the ViT bf16 bench (SDPA's decomposition upcasts q and k) 5.11 ms against 4.0
        # for our compiled math (H200, d2be5b1: 1.40 ms in 12 fmha_cutlassF_f32 calls)
        return dtype in (torch.bfloat16, torch.float16)
    if device_type(device) != "cpu":
        return True
    return scores >= _CPU_MIN_SCORES.get(dtype, _CPU_MIN_SCORES_LOW_PRECISION)


def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _shape(n) -> tuple[int, ...] | None:
    v = _val(n)
    if not isinstance(v, torch.Tensor) or not all(isinstance(s, int) for s in v.shape):
        return None
    return tuple(v.shape)


def _is_cast(n: fx.Node) -> bool:
    """A dtype conversion that changes nothing else."""
    if n.target is prims.convert_element_type.default:
        return True
    if n.target is aten._to_copy.default:
        src, out = _val(n.args[0]), _val(n)
        return (isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor) and src.device == out.device
                and set(n.kwargs) <= {"dtype", "device", "layout", "memory_format"}
                and n.kwargs.get("layout", torch.strided) == torch.strided)
    return False


_WIDER = {torch.bfloat16: (torch.float32, torch.float64), torch.float16: (torch.float32, torch.float64),
          torch.float32: (torch.float64,)}


def _holds(wide: torch.dtype, narrow: torch.dtype) -> bool:
    """Every value of `narrow` is one of `wide` (bf16 in f32)."""
    return wide == narrow or wide in _WIDER.get(narrow, ())


def _zero_fill(m: fx.Node) -> bool:
    """`m` is a tensor of zeros (full / full_like of 0, maybe cast)."""
    while m.op == "call_function" and _is_cast(m):
        m = m.args[0]
    return m.op == "call_function" and m.target in (aten.full.default, aten.full_like.default) \
        and len(m.args) > 1 and _scalar(m.args[1]) == 0


def _is_identity(n: fx.Node) -> bool:
    """An op whose result has the value and logical shape of its first argument
    (layouts may differ): a clone, an alias, an expand or view to the same shape."""
    if n.op != "call_function" or not n.args or not isinstance(n.args[0], fx.Node):
        return False
    if n.target in (aten.clone.default, aten.alias.default):
        return True
    if n.target in (aten.expand.default, *_VIEWS):
        return _shape(n) is not None and _shape(n) == _shape(n.args[0])
    return False


def _is_reshape(n: fx.Node) -> bool:
    """A row-major reinterpretation of its argument's values (views of any shape,
    clones, same-shape expands, unsqueeze/squeeze, permutes that only move dims of
    size 1, as einsum's decomposition makes)."""
    if _is_identity(n):
        return True
    if n.op != "call_function" or not n.args or not isinstance(n.args[0], fx.Node):
        return False
    if n.target in _VIEWS or n.target in _UNSQUEEZE:
        return True
    shape = _shape(n.args[0])
    if n.target is aten.permute.default and shape is not None:
        moved = [d % len(shape) for d in n.args[1] if shape[d] != 1]
        return moved == sorted(moved)
    return False


def _single_user(n: fx.Node) -> fx.Node | None:
    users = list(n.users)
    return users[0] if len(users) == 1 else None


def _scalar(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def _fill_value(x) -> float | None:
    """The value of a scalar: a Python number, or a one-element tensor the program
    computes from constants alone (scalar_tensor, full, torch.tensor(...) constants,
    pointwise ops of those: torch.tensor(d).sqrt())."""
    s = _scalar(x)
    if s is not None or not isinstance(x, fx.Node):
        return s
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        t = _constant(x, 0)
        return float(t.item()) if t is not None and not t.is_complex() else None


def _constant(x, depth: int) -> torch.Tensor | None:
    """A one-element node's value as a real CPU tensor, when it depends on constants only."""
    if not isinstance(x, fx.Node):
        return x if x is None or isinstance(x, (bool, int, float, torch.dtype)) else None
    v = _val(x)
    if depth > 8 or (isinstance(v, torch.Tensor) and v.numel() != 1):
        return None
    if x.op == "get_attr":   # a tensor constant of the program (torch.tensor(-inf))
        t = x.graph.owning_module
        for part in x.target.split("."):
            t = getattr(t, part, None)
        return t.detach().cpu() if isinstance(t, torch.Tensor) and t.numel() == 1 else None
    if x.op != "call_function" or not isinstance(v, torch.Tensor):
        return None
    t, a = x.target, x.args
    if t is aten.scalar_tensor.default and _scalar(a[0]) is not None:
        return torch.scalar_tensor(a[0], dtype=v.dtype)
    if t in (aten.full.default, aten.full_like.default) and len(a) > 1 and _scalar(a[1]) is not None:
        return torch.full(v.shape, a[1], dtype=v.dtype)
    if t in (aten.lift_fresh_copy.default, aten.clone.default, aten.alias.default):
        return _constant(a[0], depth + 1)
    if t is prims.convert_element_type.default or t is aten._to_copy.default:
        c = _constant(a[0], depth + 1)
        return None if c is None else c.to(v.dtype)
    if torch.Tag.pointwise in getattr(t, "tags", ()) and not x.kwargs:
        args = [_constant(z, depth + 1) for z in a]
        if any(z is None for z in args):
            return None
        out = t(*args)
        return out if isinstance(out, torch.Tensor) and out.numel() == 1 else None
    return None


def _scalar_factor(n: fx.Node) -> tuple[fx.Node, float] | None:
    """(x, c) when `n` is x * c or x / c for a positive finite constant scalar c that
    does not change x's shape or dtype."""
    if n.op != "call_function" or len(n.args) != 2:
        return None
    t, a = n.target, n.args
    if t in (aten.mul.Tensor, aten.mul.Scalar):
        i = 0 if isinstance(a[0], fx.Node) and _shape(a[0]) == _shape(n) else 1
        c = _fill_value(a[1 - i])
    elif t in (aten.div.Tensor, aten.div.Scalar):
        i, c = 0, _fill_value(a[1])
        c = None if c is None or c == 0 else 1.0 / c
    else:
        return None
    x = a[i]
    if c is None or not (math.isfinite(c) and c > 0) or not isinstance(x, fx.Node):
        return None
    if _shape(x) != _shape(n) or _val(x).dtype != _val(n).dtype:
        return None
    return x, c


def _peel(n: fx.Node, want: tuple[int, ...], scales: bool = False) -> tuple[fx.Node | None, float]:
    """The deepest node x of shape `want` and the factor c such that c * x, read
    row-major, has the values of `n` (through views, clones, same-shape expands
    and, with `scales`, multiplications by positive scalars)."""
    best, c = (None, 1.0), 1.0
    while True:
        if _shape(n) == want:
            best = (n, c)
        if n.op != "call_function":
            return best
        f = _scalar_factor(n) if scales else None
        if f is not None and _shape(n) == _shape(f[0]) and _val(n).dtype == _val(f[0]).dtype:
            n, c = f[0], c * f[1]
        elif _is_reshape(n):
            n = n.args[0]
        else:
            return best


def _last_two_swapped(n: fx.Node) -> fx.Node | None:
    """x when `n` is x with its last two dims swapped (permute or transpose)."""
    if n.op != "call_function" or not n.args or not isinstance(n.args[0], fx.Node):
        return None
    shape = _shape(n.args[0])
    if shape is None:
        return None
    r = len(shape)
    if n.target is aten.permute.default:
        perm = [d % r for d in n.args[1]]
        if perm == [*range(r - 2), r - 1, r - 2]:
            return n.args[0]
    if n.target is aten.transpose.int and sorted(d % r for d in n.args[1:3]) == [r - 2, r - 1]:
        return n.args[0]
    return None


def _safe_softmax_tail(sm: fx.Node) -> tuple[fx.Node, list[fx.Node]] | None:
    """(w, nodes) when softmax `sm` is followed by the decomposition of
    _safe_softmax: w = where(all(x == -inf, -1, keepdim), full_like(sm, 0), sm)
    for its input x; `nodes` are those of that tail."""
    x = sm.args[0]
    w = next((u for u in sm.users if u.target is aten.where.self and u.args[2] is sm), None)
    if w is None or not isinstance(w.args[1], fx.Node) or not isinstance(w.args[0], fx.Node):
        return None
    zero, cond = w.args[1], w.args[0]
    if zero.target is not aten.full_like.default or zero.args[0] is not sm or _scalar(zero.args[1]) != 0:
        return None
    if set(sm.users) != {w, zero} or set(zero.users) != {w} or set(cond.users) != {w}:
        return None
    r = len(_shape(sm) or ())
    if cond.target is not aten.all.dim or len(cond.args) < 3 or cond.args[1] not in (-1, r - 1) \
            or cond.args[2] is not True or not isinstance(cond.args[0], fx.Node):
        return None
    eq = cond.args[0]
    if eq.target is not aten.eq.Scalar or eq.args[0] is not x or eq.args[1] != -math.inf or set(eq.users) != {cond}:
        return None
    return w, [zero, w, cond, eq]


def _select(m: fx.Node) -> tuple[fx.Node, float, float] | None:
    """(cond, a, b) when mask `m` is where(cond, a, b) of two scalar constants:
    it is built again in q's dtype (a float32 0/-inf mask of bfloat16 scores)."""
    if m.op != "call_function" or m.target not in (aten.where.self, aten.where.Scalar, aten.where.ScalarOther,
                                                   aten.where.ScalarSelf) or len(m.args) != 3:
        return None
    a, b = _fill_value(m.args[1]), _fill_value(m.args[2])
    if a is None or b is None or not isinstance(m.args[0], fx.Node):
        return None
    return m.args[0], a, b


def _exact_in(x: float, dtype: torch.dtype) -> bool:
    """x is exact in `dtype`, or masks out (at most -1e4: rounds to a value that still does)."""
    return x <= _MASKED_FILL_MAX or torch.tensor(x, dtype=torch.float64).to(dtype).double().item() == x


def _path_from_bmm(sm: fx.Node, tail: set) -> tuple[fx.Node, list[fx.Node]] | str:
    """(bmm, path): a bmm among the near ancestors of softmax `sm`'s input whose
    single users lead to `sm`; path holds the nodes between (the softmax's input
    last, whose users may also be the `tail` nodes of _safe_softmax)."""
    x = sm.args[0]
    seen, frontier, bmms = {x}, [x], []
    while frontier and len(seen) < 48:
        n = frontier.pop(0)
        if n.op != "call_function":
            continue
        if n.target is _BMM:
            bmms.append(n)
            continue
        for z in n.all_input_nodes:
            if z not in seen:
                seen.add(z)
                frontier.append(z)
    for b in bmms:
        path, n = [], b
        while n is not x and len(n.users) == 1 and len(path) < 32:
            n = next(iter(n.users))
            path.append(n)
        if n is x and set(x.users) <= tail:
            return b, path
    return "no bmm before the softmax"


@dataclass
class _Match:
    q: fx.Node                      # the tensor fed as q: [*batch, L, E] or [N, L, E]
    k: fx.Node                      # k ([*, S, E]) or, when kt is True, k^T ([*, E, S])
    kt: bool
    v: fx.Node
    batch: tuple[int, ...]          # the scores' leading dims
    # in graph order: ("scale", c) | ("add", mask) | ("where", cond, fill, keep) | ("select", cond, a, b)
    steps: list = field(default_factory=list)
    out: fx.Node = None             # the node whose uses take the result
    out_shape: tuple[int, ...] = ()
    chain: list = field(default_factory=list)   # the nodes replaced
    bmm2: fx.Node = None
    fills: list = field(default_factory=list)   # scalar fill nodes of where / masked_fill
    causal: bool = False            # a constant causal mask, run as is_causal=True


def _match(sm: fx.Node) -> _Match | str:
    """The attention around softmax node `sm`, or why there is none."""
    x_shape = _shape(sm)
    if x_shape is None or len(x_shape) < 3:
        return "shape"
    if sm.args[1] not in (-1, len(x_shape) - 1):
        return "softmax dim"
    chain = [sm]
    # softmax's decomposition for fully masked rows (_safe_softmax: 0, not NaN),
    # as the fused kernels compute them
    safe = _safe_softmax_tail(sm)
    if safe is not None:
        chain += safe[1]
    p_last = safe[0] if safe is not None else sm
    # ---- the path from the first bmm to the softmax: every node on it has one user
    found = _path_from_bmm(sm, set(chain))
    if isinstance(found, str):
        return found
    bmm1, path = found
    chain += [bmm1, *path]
    steps, fills = [], []
    prev = bmm1
    for n in path:
        t, a = n.target, n.args
        others = [z for z in n.all_input_nodes if z is not prev]
        if sum(z is prev for z in a) > 1:
            return "scores combined with themselves"
        if _is_reshape(n) or _is_cast(n):
            pass
        elif _scalar_factor(n) is not None and _scalar_factor(n)[0] is prev:
            steps.append(("scale", _scalar_factor(n)[1]))
        elif _shape(n) != x_shape or _shape(prev) != x_shape:
            return "mask on reshaped scores"   # (or a mask that broadcasts the scores up)
        elif t is aten.add.Tensor and len(a) == 2 and n.kwargs.get("alpha", 1) == 1 and len(others) == 1:
            m = others[0]
            if not isinstance(_val(m), torch.Tensor) or _shape(m) is None:
                return "mask shape"
            sel = _select(m)
            if _zero_fill(m):
                fills.append(m)   # adds nothing (baddbmm's decomposition: beta * zeros + scores)
            elif sel is not None:
                steps.append(("select", *sel))
                fills.append(m)
            else:
                steps.append(("add", m))
        elif t in (aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf) and len(a) == 3 \
                and a[0] is not prev:
            keep = a[1] is prev
            fill = _fill_value(a[2] if keep else a[1])
            if fill is None or not fill <= _MASKED_FILL_MAX:
                return "where fill"
            steps.append(("where", a[0], fill, keep))
            fills.append(a[2] if keep else a[1])
        elif t is aten.masked_fill.Scalar and len(a) == 3 and a[0] is prev:
            fill = _fill_value(a[2])
            if fill is None or not fill <= _MASKED_FILL_MAX:
                return "masked_fill value"
            steps.append(("where", a[1], fill, False))
            fills.append(a[2])
        else:
            return f"scores op {t}"
        prev = n
    batch, (L, S) = x_shape[:-2], x_shape[-2:]
    N = math.prod(batch)
    if _shape(bmm1) != (N, L, S):
        return "bmm shape"
    E = _shape(bmm1.args[0])[-1]
    # ---- forwards from the softmax: casts, clones, views, then the second bmm
    p = p_last
    while True:
        u = _single_user(p)
        if u is None:
            return "softmax used elsewhere"
        if u.target is _BMM:
            if u.args[0] is not p or _shape(p) != (N, L, S):
                return "softmax not the bmm's left side"
            bmm2 = u
            break
        if not (_is_cast(u) or _is_reshape(u)) or u.args[0] is not p:
            return f"softmax op {u.target}"
        chain.append(u)
        p = u
    chain.append(bmm2)
    vshape = _shape(bmm2.args[1])
    if vshape is None or vshape[:2] != (N, S):
        return "v shape"
    Ev = vshape[2]
    # ---- q, k, v: the deepest tensors of the [*batch, L, E] shapes
    # (a scalar factor of q or k, as in q * scale @ k^T, joins the scale)
    q, cq = _peel(bmm1.args[0], batch + (L, E), scales=True)
    kt, ck = _peel(bmm1.args[1], batch + (E, S), scales=True)
    q = q or bmm1.args[0]
    k = _last_two_swapped(kt) if kt is not None else None
    v = _peel(bmm2.args[1], batch + (S, Ev))[0] or bmm2.args[1]
    steps.insert(0, ("scale", cq * ck))
    out, out_shape = bmm2, (N, L, Ev)
    u = _single_user(bmm2)
    if u is not None and u.target in _VIEWS and _shape(u) == batch + (L, Ev):
        out, out_shape = u, batch + (L, Ev)
        chain.append(u)
    if not _val(out).is_contiguous():
        return "result not contiguous"
    in_chain = set(chain)
    if any(z in in_chain for z in (q, k, v, kt, *(s[1] for s in steps if s[0] != "scale"))):
        return "inputs inside the pattern"
    m = _Match(q=q, k=k if k is not None else (kt or bmm1.args[1]), kt=k is None, v=v, batch=batch,
               steps=steps, out=out, out_shape=out_shape, chain=chain, bmm2=bmm2, fills=fills)
    return m


def _fold_constant_masks(m: _Match, L: int, S: int) -> None:
    """Mask steps computed from constants only (attention_masks.py's rules) that mask
    nothing are dropped, and a lone causal one becomes `m.causal`: the flash/cuDNN
    kernels take no mask. transformers' eager attention adds, while compiling, an
    all-zero float mask, or where(causal, 0, finfo.min) (GPT-2), and selects with a
    constant causal one. Adding a zero leaves a score as it is (up to the sign of a
    zero, which the softmax does not see); a fill counts as masking when it is at
    most -1e4 after the scale steps that follow it."""
    from .attention_masks import constant_mask_kind

    kept, causal = [], []
    for i, s in enumerate(m.steps):
        later = math.prod(t[1] for t in m.steps[i + 1:] if t[0] == "scale")
        kind = None
        if s[0] != "scale" and later > 0:
            limit = _MASKED_FILL_MAX / later   # fill * later <= -1e4
            if s[0] == "add":
                kind = constant_mask_kind(s[1], additive=True, masked_max=limit)
            elif s[0] == "select":   # + where(cond, a, b) of two scalars
                a, b = s[2], s[3]
                if a == 0 and b == 0:
                    kind = "none"
                elif a == 0 and b <= limit:
                    kind = constant_mask_kind(s[1])
                elif a <= limit and b == 0:
                    kind = constant_mask_kind(s[1], negate=True)
            else:   # where(cond, fill, scores) keeps ~cond
                kind = constant_mask_kind(s[1], negate=not s[3])
        if kind == "none":
            continue
        if kind == "causal":
            causal.append(s)
        kept.append(s)
    if len(causal) == 1 and L == S and [s for s in kept if s[0] != "scale"] == causal:
        kept.remove(causal[0])
        m.causal = True
    if len(kept) != len(m.steps):
        logs.log("passes", f"fuse_attention: constant masks folded ({len(m.steps) - len(kept)} step(s)"
                           f"{', is_causal' if m.causal else ''})")
        m.steps = kept


def _replacement(m: _Match, L: int, S: int, dtype: torch.dtype, out_dtype: torch.dtype):
    """The function traced in place of the match: (q, k, v, *mask inputs) -> out,
    computed in `dtype` (the widest of q, k and v: a narrower one is widened exactly)."""
    batch, steps = m.batch, m.steps

    def to4(t, last2):
        if tuple(t.shape) != batch + last2:
            t = t.reshape(batch + last2)
        return t.unsqueeze(1) if len(batch) == 1 else t

    def fn(q, k, v, *mask_inputs):
        q, k, v = (t.to(dtype) for t in (q, k, v))
        E, Ev = q.shape[-1], v.shape[-1]
        q4 = to4(q, (L, E))
        k4 = to4(k.transpose(-2, -1) if m.kt else k, (S, E))
        v4 = to4(v, (S, Ev))
        it = iter(mask_inputs)
        scale, mask = 1.0, None
        for s in steps:
            if s[0] == "scale":
                scale *= s[1]
                mask = None if mask is None else mask * s[1]
            elif s[0] == "add":
                t = next(it)
                mask = t if mask is None else mask + t
            elif s[0] == "select":
                t = torch.where(next(it), torch.full((), s[2], dtype=q.dtype, device=q.device),
                                torch.full((), s[3], dtype=q.dtype, device=q.device))
                mask = t if mask is None else mask + t
            else:
                cond = next(it)
                fill = torch.full((), s[2], dtype=q.dtype, device=q.device)
                base = mask if mask is not None else torch.zeros((), dtype=q.dtype, device=q.device)
                mask = torch.where(cond, base, fill) if s[3] else torch.where(cond, fill, base)
        if mask is not None:
            mask = mask.to(q.dtype)
            while mask.dim() < len(batch) + 2:
                mask = mask.unsqueeze(0)
            if len(batch) == 1:
                mask = mask.unsqueeze(1)
        o = torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, attn_mask=mask, scale=scale,
                                                             is_causal=m.causal)
        if len(batch) == 1:
            o = o.squeeze(1)
        o = o.to(out_dtype)
        o = o if tuple(o.shape) == m.out_shape else o.reshape(m.out_shape)
        # the bmm's result is contiguous and the nodes after it keep the strides
        # they were traced with: so is the kernel's (its [b, L, h, E] layout is copied
        # where it differs, a copy the next compiled kernel fuses)
        return o.contiguous()

    return fn


def _fused_ops() -> set[str]:
    from .partition import _LIBRARY_OPS

    return set(_LIBRARY_OPS) | {"aten::_scaled_dot_product_flash_attention_for_cpu"}


def _trace(fn, vals: list):
    """make_fx of `fn` on the graph's fake values, with torch choosing among the
    flash and memory-efficient kernels only."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mode = detect_fake_mode(vals)
    if mode is None:
        mode = FakeTensorMode()
        vals = [mode.from_tensor(v) for v in vals]
    with mode, sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch's "kernel not used because ..." notes
        return make_fx(fn, tracing_mode="real")(*vals)


def fuse_attention(gm: fx.GraphModule) -> int:
    """Rewrites every hand-written attention of `gm` that a fused kernel computes
    (see the module docstring); returns how many. `gm.recompile()` is the caller's."""
    if not enabled():
        return 0
    from .fxutil import op_name

    fused_names = _fused_ops()
    count = 0
    for sm in [n for n in gm.graph.nodes if n.op == "call_function" and n.target in _SOFTMAX]:
        try:
            m = _match(sm)
        except Exception as e:  # noqa: BLE001 - a graph this matcher does not understand stays as it is
            m = f"{type(e).__name__}: {e}"
        if isinstance(m, str):
            logs.log("passes", f"fuse_attention: {sm.name} not fused ({m})")
            continue
        L, S = _shape(sm)[-2:]
        _fold_constant_masks(m, L, S)
        ins = [m.q, m.k, m.v]
        for s in m.steps:
            if s[0] in ("add", "where", "select"):
                ins.append(s[1])
        vals = [_val(z) for z in ins]
        if not all(isinstance(v, torch.Tensor) and all(isinstance(d, int) for d in v.shape) for v in vals):
            continue
        if not all(v.is_floating_point() and not v.is_complex() for v in vals[:3]):
            continue
        dtype = max((v.dtype for v in vals[:3]), key=lambda d: torch.finfo(d).bits)
        if not all(_holds(dtype, v.dtype) for v in vals[:3]):
            logs.log("passes", f"fuse_attention: {sm.name} not fused (q, k, v dtypes)")
            continue
        if any(s[0] == "add" and not _holds(dtype, _val(s[1]).dtype) for s in m.steps) or \
                any(s[0] == "select" and not (_exact_in(s[2], dtype) and _exact_in(s[3], dtype)) for s in m.steps):
            logs.log("passes", f"fuse_attention: {sm.name} not fused (the mask would be rounded)")
            continue
        if not _worth_it(vals[0].device, dtype, math.prod(_shape(sm))):
            logs.log("passes", f"fuse_attention: {sm.name} not fused (scores too small for the CPU kernel)")
            continue
        try:
            traced = _trace(_replacement(m, L, S, dtype, _val(m.bmm2).dtype), vals)
        except Exception as e:  # noqa: BLE001 - no fused kernel applies (torch's checks)
            logs.log("passes", f"fuse_attention: {sm.name} not fused (no fused kernel: {e})")
            continue
        if not any(n.op == "call_function" and op_name(n.target) in fused_names for n in traced.graph.nodes):
            logs.log("passes", f"fuse_attention: {sm.name} not fused (torch chose the math kernel)")
            continue
        _inline(gm, traced, ins, m)
        count += 1
    if count:
        gm.graph.lint()
        logs.log("passes", f"fuse_attention: {count} attention(s) fused")
    return count


def _inline(gm: fx.GraphModule, traced: fx.GraphModule, ins: list[fx.Node], m: _Match) -> None:
    """Copies `traced` into gm before the second bmm, its placeholders bound to
    `ins`; the match's output takes its result and the matched nodes go."""
    env: dict[fx.Node, fx.Node] = {}
    placeholders = iter(ins)
    result = None
    stack = m.chain[0].meta.get("stack_trace")
    with gm.graph.inserting_before(m.bmm2):
        for n in traced.graph.nodes:
            if n.op == "placeholder":
                env[n] = next(placeholders)
            elif n.op == "output":
                result = env[n.args[0][0] if isinstance(n.args[0], (tuple, list)) else n.args[0]]
            else:
                new = gm.graph.node_copy(n, lambda a: env[a])
                if stack is not None:
                    new.meta.setdefault("stack_trace", stack)
                env[n] = new
    m.out.replace_all_uses_with(result)
    # the matched nodes, then what only they used: the views and copies of q, k
    # and v that fed the bmms, the scalar fills of where / masked_fill, ...
    dead = [*m.fills, *(z for n in m.chain for z in n.all_input_nodes)]
    for n in sorted(m.chain, key=_order(gm), reverse=True):
        if not n.users:
            gm.graph.erase_node(n)
    gone = set(m.chain)
    while dead:
        z = dead.pop()
        if not isinstance(z, fx.Node) or z in gone or z.users or not _pure(z):
            continue
        gone.add(z)
        dead.extend(z.all_input_nodes)
        gm.graph.erase_node(z)


def _pure(n: fx.Node) -> bool:
    """`n` computes a value and nothing else (no effect, no draw from the generator)."""
    if n.op == "get_attr":
        return True
    return (n.op == "call_function" and not n.is_impure()
            and torch.Tag.nondeterministic_seeded not in getattr(n.target, "tags", ()))


def _order(gm: fx.GraphModule):
    pos = {n: i for i, n in enumerate(gm.graph.nodes)}
    return pos.__getitem__

