"""Complex tensors compiled as pairs of reals; FFTs as library calls.

The compiler has no complex types: a complex op was an eager island, and so was every
op on its way (an `fft.ifft` of an integer tensor ran its conversion, the FFT and the
conjugate through torch). `lower_complex` rewrites an aten graph so that every complex
value is a real tensor with one more trailing dimension of 2 (real and imaginary part:
`view_as_real`'s layout), computed by ordinary real ops that compile:

* conversions of real tensors to complex (`x.to(cfloat)`: the real part and a zero
  imaginary part), `torch.complex`, `torch.polar`, `view_as_complex` of a real tensor
  (the pair itself);
* views and copies (slice, select, view/reshape, permute, transpose, t, (un)squeeze, expand,
  cat, clone, constant padding with 0) on the pair, the dimension arguments moved past
  the pair's last dimension; conjugates (`_conj`, `conj_physical`: the imaginary part
  negated), negation, addition, subtraction, multiplication;
* `view_as_real`, `real`, `imag` (the pair, or one half of it), `abs` (in float64,
  rounded once, as the correctly rounded hypot eager calls; +inf where a part is infinite,
  scaled where float64 squares leave the range), `angle` (atan2).

The FFTs (`_fft_r2c`, `_fft_c2c`, `_fft_c2r`) are library calls through torch (pocketfft /
MKL on the CPU, cuFFT on the GPU, as inductor calls them: partition.py's "library"
islands, like matmul's library step): they read their complex operand as
`view_as_complex` of its pair and give their complex result back as `view_as_real`,
both views (nothing is copied). A complex graph output is `view_as_complex` of its pair.

A graph with any other op on a complex value (or a complex input or constant) is left as
it was: those ops stay eager islands (partition.py: "dtype complex64").
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .fxutil import op_name

aten = torch.ops.aten
prims = torch.ops.prims

FFT_OPS = ("aten::_fft_r2c", "aten::_fft_c2c", "aten::_fft_c2r")
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
# complex32 (chalf): eager's kernels compute its arithmetic in their own precision, so only
# what moves or converts its half-precision parts once (each rounding eager's own) is rewritten
_HALF_OPS = frozenset({
    "aten::_to_copy", "prims::convert_element_type", "aten::complex", "aten::view_as_complex", "aten::view_as_real",
    "aten::real", "aten::imag", "aten::_conj", "aten::conj_physical", "aten::_conj_physical", "aten::conj",
    "aten::resolve_conj", "aten::resolve_neg", "aten::clone", "aten::alias", "aten::detach", "aten::lift_fresh_copy",
    "aten::neg", "aten::slice", "aten::select", "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::expand",
    "aten::permute", "aten::t", "aten::transpose", "aten::unsqueeze", "aten::squeeze", "aten::constant_pad_nd",
    "aten::cat"})
# real dtypes whose conversion to float16 eager rounds once (the others go through float first)
_HALF_EXACT_SOURCES = (torch.float16, torch.float32, torch.bfloat16, torch.bool, torch.uint8, torch.int8, torch.int16)
# meta key of the view_as_real / view_as_complex nodes between pairs and complex values:
# zero-cost views that join the library calls around them (partition.py)
BOUNDARY = "mlircap_complex_view"


class _Unsupported(Exception):
    pass


def _is_complex(v) -> bool:
    return isinstance(v, torch.Tensor) and v.is_complex()


def _complex_vals(node: fx.Node) -> bool:
    v = node.meta.get("val")
    vals = v if isinstance(v, (list, tuple)) else [v]
    return any(_is_complex(x) for x in vals)


class _Builder:
    def __init__(self, graph: fx.Graph, mode):
        self.g, self.mode = graph, mode
        self.node: fx.Node | None = None   # the original node being rewritten (for its meta)

    def __call__(self, target, *args, **kwargs) -> fx.Node:
        n = self.g.call_function(target, args, kwargs)
        a, k = fx.node.map_arg((args, kwargs), lambda x: x.meta["val"])
        try:
            if self.mode is not None:
                with self.mode:
                    n.meta["val"] = target(*a, **k)
            else:
                n.meta["val"] = target(*a, **k)
        except Exception as e:  # noqa: BLE001 - the rewrite does not apply: leave the graph
            raise _Unsupported(f"{target}: {e}") from e
        if self.node is not None:
            for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
                if key in self.node.meta:
                    n.meta[key] = self.node.meta[key]
        return n

    def boundary(self, target, x) -> fx.Node:
        n = self(target, x)
        n.meta[BOUNDARY] = True
        return n


def _rank(node: fx.Node) -> int:
    return node.meta["val"].dim()


def _dim(d: int, rank: int) -> int:
    """A dimension argument of a complex tensor of `rank`, as a dimension of its pair."""
    if rank == 0:
        return 0
    return d + rank if d < 0 else d


def _stack(b: _Builder, re: fx.Node, im: fx.Node) -> fx.Node:
    return b(aten.cat.default, [b(aten.unsqueeze.default, re, -1), b(aten.unsqueeze.default, im, -1)], -1)


def _parts(b: _Builder, pair: fx.Node) -> tuple[fx.Node, fx.Node]:
    return b(aten.select.int, pair, -1, 0), b(aten.select.int, pair, -1, 1)


def _from_real(b: _Builder, x: fx.Node, real: torch.dtype) -> fx.Node:
    """The pair of a real tensor converted to complex: its value and a zero imaginary part."""
    if x.meta["val"].dtype != real:
        x = b(prims.convert_element_type.default, x, real)
    return b(aten.constant_pad_nd.default, b(aten.unsqueeze.default, x, -1), [0, 1], 0.0)


def _operand_pair(b: _Builder, x, pairs: dict, env: dict, real: torch.dtype) -> fx.Node:
    if isinstance(x, fx.Node) and x in pairs:
        return pairs[x]
    if isinstance(x, fx.Node) and isinstance(x.meta.get("val"), torch.Tensor) and not _is_complex(x.meta["val"]):
        return _from_real(b, env[x], real)
    raise _Unsupported("operand is neither a complex nor a real tensor")


def _rewrite(b: _Builder, n: fx.Node, pairs: dict, env: dict) -> None:
    """Adds the nodes computing `n` on pairs: sets pairs[n] (a complex result) or env[n]
    (a real one)."""
    name = op_name(n.target)
    args, kwargs = n.args, dict(n.kwargs)
    val = n.meta.get("val")
    out_complex = _is_complex(val)
    real = _REAL.get(val.dtype) if out_complex else None
    if out_complex and real is None:
        raise _Unsupported(f"dtype {val.dtype}")
    half = real == torch.float16 or any(a in pairs and pairs[a].meta["val"].dtype == torch.float16
                                        for a in n.all_input_nodes)
    if half and name not in _HALF_OPS:
        raise _Unsupported(f"{name} of complex32")
    if name in FFT_OPS:
        x = args[0]
        operand = b.boundary(aten.view_as_complex.default, pairs[x]) if x in pairs else env[x]
        res = b(n.target, operand, *args[1:], **kwargs)
        if out_complex:
            pairs[n] = b.boundary(aten.view_as_real.default, res)
        else:
            env[n] = res
        return
    if name in ("aten::_to_copy", "prims::convert_element_type"):
        dtype = args[1] if name == "prims::convert_element_type" else kwargs.pop("dtype", None)
        extra = {k: v for k, v in kwargs.items() if v is not None}
        if any(k not in ("device", "layout", "memory_format") for k in extra) or \
                extra.get("layout", torch.strided) != torch.strided or \
                extra.get("device", val.device) != val.device or \
                extra.get("memory_format", torch.preserve_format) not in (torch.preserve_format, torch.contiguous_format):
            raise _Unsupported(f"{name} with {extra}")
        x = args[0]
        src = pairs[x].meta["val"].dtype if x in pairs else x.meta["val"].dtype
        if real == torch.float16 and src not in _HALF_EXACT_SOURCES:
            raise _Unsupported(f"{name} of {src} to complex32")
        if x not in pairs:          # real -> complex
            pairs[n] = _from_real(b, env[x], real)
        elif out_complex:           # complex -> complex
            pairs[n] = pairs[x] if pairs[x].meta["val"].dtype == real else \
                b(prims.convert_element_type.default, pairs[x], real)
        elif dtype is not None and dtype.is_floating_point:   # complex -> real: the real part
            env[n] = b(prims.convert_element_type.default, b(aten.select.int, pairs[x], -1, 0), dtype)
        else:
            raise _Unsupported(f"{name} to {dtype}")
        return
    if name == "aten::complex":
        shape = list(val.shape)
        re = b(aten.expand.default, env[args[0]], shape)
        im = b(aten.expand.default, env[args[1]], shape)
        pairs[n] = _stack(b, re, im)
        return
    if name == "aten::polar":
        shape = list(val.shape)
        r = b(aten.expand.default, env[args[0]], shape)
        t = b(aten.expand.default, env[args[1]], shape)
        pairs[n] = _stack(b, b(aten.mul.Tensor, r, b(aten.cos.default, t)), b(aten.mul.Tensor, r, b(aten.sin.default, t)))
        return
    if name == "aten::view_as_complex":
        pairs[n] = env[args[0]]
        return
    if name == "aten::cat" and out_complex:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        pairs[n] = b(aten.cat.default, [_operand_pair(b, t, pairs, env, real) for t in args[0]], _dim(dim, val.dim()))
        return
    x = args[0] if args else None
    if not isinstance(x, fx.Node) or x not in pairs:
        raise _Unsupported(f"{name} on a real operand with a complex result")
    p = pairs[x]
    if name == "aten::view_as_real":
        env[n] = p
        return
    if name in ("aten::real", "aten::imag"):
        env[n] = b(aten.select.int, p, -1, 0 if name == "aten::real" else 1)
        return
    if name == "aten::abs" and not out_complex:
        re, im = _parts(b, p)
        wide = [b(prims.convert_element_type.default, t, torch.float64) for t in (re, im)]
        s = b(aten.add.Tensor, b(aten.mul.Tensor, wide[0], wide[0]), b(aten.mul.Tensor, wide[1], wide[1]))
        r = b(aten.sqrt.default, s)
        if re.meta["val"].dtype == torch.float64:
            # float64 parts: squares past the range (|z| > 1e154) or below it (< 1e-154) are
            # scaled by the larger part, m * sqrt(1 + (n / m)^2), as hypot scales them
            a = [b(aten.abs.default, t) for t in wide]
            m, lo = b(aten.maximum.default, a[0], a[1]), b(aten.minimum.default, a[0], a[1])
            q = b(aten.div.Tensor, lo, m)
            scaled = b(aten.mul.Tensor, m, b(aten.sqrt.default, b(aten.add.Tensor, b(aten.mul.Tensor, q, q), 1.0)))
            far = b(aten.logical_or.default, b(aten.gt.Scalar, m, 1e150),
                    b(aten.logical_and.default, b(aten.lt.Scalar, m, 1e-150), b(aten.gt.Scalar, m, 0.0)))
            r = b(aten.where.self, far, scaled, r)
        # hypot of an infinite part is +inf, a NaN other part included (eager's std::abs)
        inf = b(aten.logical_or.default, b(aten.isinf.default, wide[0]), b(aten.isinf.default, wide[1]))
        r = b(aten.masked_fill.Scalar, r, inf, float("inf"))
        env[n] = b(prims.convert_element_type.default, r, val.dtype)
        return
    if name == "aten::angle" and not out_complex:
        re, im = _parts(b, p)
        env[n] = b(aten.atan2.default, im, re)
        return
    if not out_complex:
        raise _Unsupported(f"{name} with a real result")
    r = _rank(x)
    if name in ("aten::_conj", "aten::conj_physical", "aten::_conj_physical", "aten::conj", "aten::resolve_conj",
                "aten::resolve_neg"):
        if name in ("aten::resolve_conj", "aten::resolve_neg"):
            pairs[n] = p
            return
        re, im = _parts(b, p)
        pairs[n] = _stack(b, re, b(aten.neg.default, im))
    elif name in ("aten::clone", "aten::alias", "aten::detach", "aten::lift_fresh_copy", "aten::neg"):
        if kwargs.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
            raise _Unsupported("clone to a memory format")
        pairs[n] = b(n.target, p)
    elif name == "aten::slice":
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        rest = list(args[2:])
        pairs[n] = b(aten.slice.Tensor, p, _dim(dim, r), *rest)
    elif name == "aten::select":
        pairs[n] = b(aten.select.int, p, _dim(args[1], r), args[2])
    elif name in ("aten::view", "aten::_unsafe_view", "aten::reshape"):
        pairs[n] = b(n.target, p, [*args[1], 2])
    elif name == "aten::expand":
        pairs[n] = b(aten.expand.default, p, [*args[1], 2])
    elif name == "aten::permute":
        pairs[n] = b(aten.permute.default, p, [_dim(d, r) for d in args[1]] + [r])
    elif name == "aten::t":
        pairs[n] = b(aten.transpose.int, p, 0, 1) if r == 2 else p
    elif name == "aten::transpose":
        pairs[n] = b(aten.transpose.int, p, _dim(args[1], r), _dim(args[2], r))
    elif name == "aten::unsqueeze":
        pairs[n] = b(aten.unsqueeze.default, p, _dim(args[1], r + 1))
    elif name == "aten::squeeze":
        x_shape = args[0].meta["val"].shape
        if len(args) == 1:
            dims = [d for d, s in enumerate(x_shape) if s == 1]
        else:
            ds = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
            dims = [_dim(d, r) for d in ds]
        pairs[n] = b(aten.squeeze.dims, p, dims) if dims else p
    elif name == "aten::constant_pad_nd":
        value = args[2] if len(args) > 2 else kwargs.get("value", 0)
        if value != 0:
            raise _Unsupported("complex padding value")
        pairs[n] = b(aten.constant_pad_nd.default, p, [0, 0, *args[1]], 0.0)
    elif name in ("aten::add", "aten::sub") and len(args) == 2 and isinstance(args[1], fx.Node):
        alpha = kwargs.get("alpha", 1)
        if isinstance(alpha, complex) or kwargs.keys() - {"alpha"}:
            raise _Unsupported(f"{name} with {kwargs}")
        q = _operand_pair(b, args[1], pairs, env, real)
        pairs[n] = b(aten.add.Tensor if name == "aten::add" else aten.sub.Tensor, p, q, alpha=alpha)
    elif name == "aten::mul" and len(args) == 2:
        other = args[1]
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            pairs[n] = b(aten.mul.Tensor, p, other)
        elif isinstance(other, fx.Node) and other in pairs:
            a_re, a_im = _parts(b, p)
            b_re, b_im = _parts(b, pairs[other])
            re = b(aten.sub.Tensor, b(aten.mul.Tensor, a_re, b_re), b(aten.mul.Tensor, a_im, b_im))
            im = b(aten.add.Tensor, b(aten.mul.Tensor, a_re, b_im), b(aten.mul.Tensor, a_im, b_re))
            pairs[n] = _stack(b, re, im)
        elif isinstance(other, fx.Node) and isinstance(other.meta.get("val"), torch.Tensor):
            o = env[other]
            if o.meta["val"].dtype != real:
                o = b(prims.convert_element_type.default, o, real)
            pairs[n] = b(aten.mul.Tensor, p, b(aten.unsqueeze.default, o, -1))
        else:
            raise _Unsupported(f"mul by {type(other).__name__}")
    else:
        raise _Unsupported(name)
    if pairs[n].meta["val"].dtype != real or list(pairs[n].meta["val"].shape) != [*val.shape, 2]:
        raise _Unsupported(f"{name}: pair {pairs[n].meta['val'].dtype} {tuple(pairs[n].meta['val'].shape)} "
                           f"for {val.dtype} {tuple(val.shape)}")


def lower_complex(gm: fx.GraphModule) -> bool:
    """Rewrites `gm` as the module docstring says; False (and `gm` unchanged) where it
    has no complex value or one the rewrite does not handle."""
    from torch._guards import detect_fake_mode

    nodes = list(gm.graph.nodes)
    if not any(_complex_vals(n) for n in nodes if n.op != "output"):
        return False
    for n in nodes:
        if n.op in ("placeholder", "get_attr") and _complex_vals(n):
            return False
        if n.op == "call_function" and n.target is operator.getitem and _complex_vals(n):
            return False
    vals = [v for n in nodes for v in ([n.meta.get("val")] if n.op != "output" else [])
            if isinstance(v, torch.Tensor)]
    mode = detect_fake_mode(vals)
    new = fx.Graph()
    b = _Builder(new, mode)
    env: dict[fx.Node, fx.Node] = {}
    pairs: dict[fx.Node, fx.Node] = {}
    try:
        for n in nodes:
            if n.op == "output":
                outs = []
                for o in (n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]):
                    if isinstance(o, fx.Node) and o in pairs:
                        b.node = o
                        outs.append(b.boundary(aten.view_as_complex.default, pairs[o]))
                    elif isinstance(o, fx.Node):
                        outs.append(env[o])
                    else:
                        outs.append(o)
                new.output(tuple(outs) if isinstance(n.args[0], (list, tuple)) else outs[0])
                continue
            touches = n.op == "call_function" and (_complex_vals(n) or any(a in pairs for a in n.all_input_nodes))
            if not touches:
                env[n] = new.node_copy(n, lambda a: env[a])
                continue
            if not isinstance(n.target, torch._ops.OpOverload):
                raise _Unsupported(str(n.target))
            b.node = n
            _rewrite(b, n, pairs, env)
    except (_Unsupported, KeyError):
        return False
    new.eliminate_dead_code()
    gm.graph = new
    gm.recompile()
    return True
