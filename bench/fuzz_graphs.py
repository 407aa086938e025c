"""Random-program differential fuzzer: mlircap.compile against eager on small random PyTorch
functions generated from a seed.

    python bench/fuzz_graphs.py --seeds 0:300 --jobs 1            # a range of seeds
    python bench/fuzz_graphs.py --seed 17 --show                  # print one program (and run it)
    python bench/fuzz_graphs.py --seeds 0:300 --json /tmp/fz.json  # records, for --report

Each seed gives one function `f(x0, x1, ...)` of 3-12 ops drawn from op families (FAMILIES):
pointwise unary / binary with broadcasting and type promotion between float / int / bool / bf16
operands and Python scalars, reductions (dims, dim lists, keepdim), views (view / reshape /
permute / transpose / expand / slices with steps / narrow / unfold / as_strided / diagonal /
dtype views), cat / stack / split / chunk, indexing with int / bool / tensor indices,
in-place ops (index_put_ / scatter_ / masked_fill_ / setitem / add_ ...) on inputs and on views
of inputs, matmul / bmm / einsum / linear, norms, softmax, where / clamp / min / max with
NaN / inf / -0.0, scans and sorts, conv1d / conv2d, pooling, interpolate and pad, RNG ops
(every call follows torch.manual_seed), constants and outputs that alias inputs. Every op is
checked eagerly while the program is generated (an op eager rejects is drawn again), so the
program runs eagerly at its first input shapes. Inputs have random shapes (size-0 / size-1
dims included), layouts (transposed, sliced with a step, storage offset, expanded,
channels_last), dtypes (float32 / bfloat16 / float16 / float64 / int64 / int32 / uint8 / bool)
and values (NaN, inf, -0.0, large and tiny numbers). Dims are named sizes: the second input set
gives some of them other values, so the same program runs at another shape.

Every program runs in a worker process (bench/opinfo.py's Pool: a crash or a timeout is
recorded, not fatal). The program is called eagerly, then compiled with mlircap.compile and
called twice at the first shapes (the first call records, the second replays the compiled
variant) and once at the second shapes; each call is preceded by torch.manual_seed and runs on
fresh copies of the inputs with their exact layout. Outputs are compared with eager on values
(per-dtype tolerance relative to the output's scale; integers and bools exactly), the NaN
pattern, dtype and shape; so are the inputs the call mutated; where eager raises, compiled must
raise the same exception type. A program is one of

    compiled     compiled and correct (every graph compiled, the second call replayed it)
    fallback     correct, but part of it ran eagerly (the reason is recorded)
    wrong        an output or a mutated input differs from eager
    crash        the worker process died (segfault, abort)
    error        compiled raised where eager did not, or another exception type than eager's
    timeout      over --timeout seconds

For every program that is not compiled / fallback the report prints its source (the function
and its inputs), which `--seed N --show` prints again.

Generator v2 (selected explicitly; a seed's program without these options is generator v1's,
unchanged):

    python bench/fuzz_graphs.py --seeds 0:600 --grad                  # training mode
    python bench/fuzz_graphs.py --seeds 0:600 --families modules      # nn modules and losses
    python bench/fuzz_graphs.py --seeds 0:600 --families dtypes       # integer / bool / half dtypes
    python bench/fuzz_graphs.py --seeds 0:600 --families tensorops    # sorts, scatters, linalg ...
    python bench/fuzz_graphs.py --seeds 0:150 --families userops      # attention, fft, distributions ...
    python bench/fuzz_graphs.py --seeds 0:300 --families edges        # promotion, 0-dim, size-0, out=, views

`--grad`: floating inputs (not loss targets) require grad, the outputs are reduced to one
float64 loss (each weighted by a fixed pattern of element positions), .backward(); the forward
outputs, every input's .grad and every module parameter's .grad are compared with eager's.
`--families GROUP` (GROUPS: a weight table over the v2 families below and some v1 ones):
`modules` builds nn modules in the program's setup (Conv1d/2d/3d with groups, dilation and
every padding mode, ConvTranspose, BatchNorm / InstanceNorm in train and eval, GroupNorm,
LayerNorm, max / avg / adaptive / LP pooling with ceil_mode and return_indices, Upsample and
interpolate (nearest / linear / bicubic, align_corners, antialias, scale factors), PixelShuffle,
Embedding / EmbeddingBag, every nn activation, Dropout in eval; Sequential, a residual custom
nn.Module, a ModuleList with functions between) and losses (cross_entropy with ignore_index /
label_smoothing / weights / probabilities, nll, bce(_with_logits), smooth_l1, huber, kl_div, ctc,
margin losses, cosine_embedding, triplet, poisson / gaussian nll); every call starts from the
modules' initial state and their buffers after the call are compared too. `dtypes`: int8 /
uint8 / int16 / int32 / int64 / bool arithmetic, bitwise ops, shifts, integer division and
remainder with negatives and zeros, comparisons, casts between every dtype pair (a float cast
to an integer type clamped into its range first: out of range is undefined in eager).
`tensorops`: sort / argsort / topk / kthvalue / median / mode / unique / searchsorted / bucketize
/ histc / bincount, tril / triu / diag / diag_embed, flip / roll / rot90, repeat_interleave,
index_add / index_copy / index_fill / masked_scatter, take_along_dim, narrow / unfold / movedim,
where / masked_fill / clamp with tensor bounds, lerp / addcmul / addcdiv, softmax / logsumexp of
-inf rows, nan_to_num, linalg (norms, solve / inv / det / cholesky / slogdet on SPD matrices, qr,
eigvalsh). `userops` (generator v3's families): F.scaled_dot_product_attention with bool and
additive -inf masks (rows fully masked), is_causal, scale, enable_gqa, and its hand-written form;
torch.fft (rfft / fft / irfft round trips, norms, fftshift, n); einsum equations (transposes,
diagonals, traces, outer products, ellipsis); torch.distributions (log_prob / cdf / entropy /
rsample / kl of Normal, Laplace, Uniform out of its support, Bernoulli, Categorical, Gamma, Beta,
Poisson, MultivariateNormal, ...); masked_fill with -inf then softmax, where with scalar
branches, scans with a dtype. `edges` (fam_edges): type promotion of tensors against 0-dim
tensors and Python scalars of other dtypes, in-place ops casting back into their operand, `out=`
(resized), metadata in-place ops (t_ / unsqueeze_ / as_strided_ / resize_) on inputs, writes
through stored views, reductions over size-0 dims, numbers from shapes and .item(); its inputs
mix every dtype with 0-dim and size-0 shapes. Programs of v2 run at a fourth input set too (the first shapes, other values), and
where eager rejects the second shapes (a module bound to a size) that set keeps the first ones.

A float result that differs from eager's beyond the dtype's tolerance is accepted when it is no
farther from the program's float64 result (floating inputs, modules and default dtype float64)
than twice eager's own distance from it, plus a tenth of the tolerance (root mean square over
the finite elements: torch._dynamo's `same(..., fp64_ref)` criterion): an ill-conditioned step
after a one-ulp difference (sin of 1e4 times a batch-norm output, seed 847: eager's CPU kernel
sums the batch statistics in its vectorized order, which a compiled reduction does not follow)
moves eager's result as far. An integer or bool result (a rank, a count, a comparison) that
differs is accepted only where eager's own differs from the float64 program's, and in at most
twice as many positions as eager's (tensorops seed 120: searchsorted ranks of 2-norms one ulp from eager's).
The record notes it ("fp64"). A program that draws random numbers runs in float64 with its own
run's draws, cast (float64 draws other numbers; --grad seed 1171: frac() of a layer_norm output
near 1e4 after rand_like, compiled 20x closer to float64 than eager); one with a draw that
depends on tensor values (normal of a mean tensor, rrelu) gets no float64 reference.

Only memory eager defines is compared: an element eager computes from memory nothing wrote (the
bytes a resize_ grows a storage by, torch.empty's) is the allocator's garbage in eager too. On a
mismatch, eager runs three more times with that memory filled with three values (NaN / -2500 /
0.75, an integer type's max / min / 7); the elements on which those runs disagree are not
compared, every other element still is (edges seed 1844: an input's resize_(31) grew its storage
and the grown elements, cast to uint8, differed from run to run in eager itself).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import math
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import opinfo  # noqa: E402  (bench/opinfo.py: worker pool, comparison, compiled status)

CATEGORIES = ("compiled", "fallback", "wrong", "crash", "error", "timeout")
CALL_SEED = 1234
MAX_NUMEL = 1 << 16

FLOATS = ("float32", "bfloat16", "float16", "float64")
INTS = ("int64", "int32", "uint8")
DTYPE_WEIGHTS = (("float32", 10), ("bfloat16", 3), ("float16", 2), ("float64", 2), ("int64", 3),
                 ("int32", 2), ("uint8", 1), ("bool", 2))
SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
LAYOUTS = ("contig", "contig", "contig", "T", "step", "offset", "expand", "channels_last")
FILLS = ("normal", "normal", "normal", "extreme", "positive", "ties")


# --------------------------------------------------------------------------- inputs

def make_input(spec, sizes, seed):
    """The tensor of an input spec {"dims": [symbol or int], "dtype", "layout", "fill"} with the
    symbols' sizes; deterministic in (spec, sizes, seed)."""
    import torch

    if spec["layout"] == "alias":     # made by _aliased from the input it views
        return torch.empty(0)
    g = torch.Generator().manual_seed(seed)
    shape = [sizes[d] if isinstance(d, str) else d for d in spec["dims"]]
    dt = getattr(torch, spec["dtype"])
    layout, fill = spec["layout"], spec["fill"]
    if layout == "expand" and shape:
        base_shape = [1 if i in spec.get("expand_dims", [0]) else n for i, n in enumerate(shape)]
    else:
        base_shape = list(shape)
    if layout == "T" and len(shape) >= 2:
        alloc = base_shape[:-2] + [base_shape[-1], base_shape[-2]]
    elif layout == "step" and shape:
        alloc = [base_shape[0] * 2] + base_shape[1:]
    else:
        alloc = base_shape
    n = math.prod(alloc) + (1 if layout == "offset" else 0)
    if fill in ("class", "binary", "sign"):      # targets of the loss family (generator v2)
        if fill == "class":
            flat = torch.randint(spec.get("low", 0), max(spec.get("high", 2), spec.get("low", 0) + 1), (n,),
                                 generator=g)
            if spec.get("low", 0) == 0:
                flat = torch.where(torch.rand(n, generator=g) < 0.1, -100, flat)   # ignore_index's default
        else:
            flat = (torch.rand(n, generator=g) < 0.5).double()
            if fill == "sign":
                flat = flat * 2 - 1
        flat = flat.to(dt)
    elif dt.is_floating_point:
        if fill == "extreme":
            pool = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.0, -1.0, 0.5,
                                 1e4, -3e3, 1e-30, 2.5, -7.0], dtype=torch.float64)
            flat = pool[torch.randint(0, len(pool), (n,), generator=g)]
            flat = torch.where(torch.rand(n, generator=g) < 0.5, torch.randn(n, generator=g, dtype=torch.float64), flat)
        elif fill == "positive":
            flat = torch.rand(n, generator=g, dtype=torch.float64) * 2 + 0.1
        elif fill == "ties":
            flat = torch.randint(-3, 4, (n,), generator=g).double()
        else:
            flat = torch.randn(n, generator=g, dtype=torch.float64) * 2
        flat = flat.to(dt)
    elif dt == torch.bool:
        flat = torch.rand(n, generator=g) < 0.5
    elif dt == torch.uint8:
        flat = torch.randint(0, 256, (n,), generator=g).to(dt)
    elif fill == "extreme" and dt in (torch.int8, torch.int16):     # generator v2's dtypes
        info = torch.iinfo(dt)
        flat = torch.randint(info.min, info.max + 1, (n,), generator=g).to(dt)
    else:
        lo, hi = (-2**31, 2**31) if (fill == "extreme" and dt == torch.int32) else (-20, 21)
        flat = torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64)
        if fill == "extreme" and dt == torch.int64:
            flat = flat * (2**40)
        flat = flat.to(dt)
    if layout == "offset":
        t = flat[1:].view(alloc)
    else:
        t = flat.view(alloc)
    if layout == "T" and len(shape) >= 2:
        t = t.transpose(-1, -2)
    elif layout == "step" and shape:
        t = t[::2]
    elif layout == "expand" and shape:
        t = t.expand(shape)
    elif layout == "channels_last" and len(shape) == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def make_inputs(prog, alt=False):
    """The first input set, the second (alt=True: other sizes and values) or, alt="values",
    the first sizes with other values. Under --grad the floating ones require grad."""
    sizes = prog["alt_sizes"] if alt is True else prog["sizes"]
    off = {False: 0, True: 500, "values": 250}[alt]
    ts = [make_input(s, sizes, prog["seed"] * 1000 + i + off) for i, s in enumerate(prog["inputs"])]
    ts = _aliased(prog["inputs"], ts)
    if prog.get("grad"):
        ts = [t.requires_grad_() if t.is_floating_point() and not _no_grad_spec(s) else t
              for t, s in zip(ts, prog["inputs"])]
    return ts


def _aliased(specs, ts):
    """The inputs with each spec of layout "alias" a view ("view", an expression of x) of an
    earlier input ("alias": its index): the caller passes one tensor twice, or two views of one
    storage (edges group)."""
    if not any(s["layout"] == "alias" for s in specs):
        return ts
    import torch

    ts = list(ts)
    for i, s in enumerate(specs):
        if s["layout"] == "alias":
            ts[i] = eval(s["view"], {"x": ts[s["alias"]], "torch": torch})  # noqa: S307 - the generator's own view
    return ts


def _no_grad_spec(spec):
    """Loss targets and class weights (no derivative in eager for most losses) take no gradient."""
    return spec.get("nograd", False) or spec["fill"] in ("class", "binary", "sign")


# --------------------------------------------------------------------------- generator

class Gen:
    """Builds one program op by op, running each op eagerly on the first inputs as it goes."""

    def __init__(self, seed, grad=False):
        import torch
        import torch.nn.functional as F

        self.torch = torch
        self.seed = seed
        self.grad = grad
        self.setup = []       # statements building the program's modules (generator v2)
        self.rng = random.Random(seed)
        self.sizes = {}
        self.alt_sizes = {}
        self.inputs = []
        self.lines = []
        self.ns = {"torch": torch, "F": F, "nan": float("nan"), "inf": float("inf")}
        self.vars = []        # names of tensors, in order of definition
        self.input_names = []
        self.families = []
        self.float_dtypes = set()    # of every value: a result is compared at the loosest one's tolerance
        self.exact_saves = False     # try_line's copies keep layouts and aliasing (edges group)

    # ----- sizes and inputs
    def sym(self, value=None):
        r = self.rng
        if value is not None:
            for k, v in self.sizes.items():
                if v == value:
                    return k
        name = f"s{len(self.sizes)}"
        v = value if value is not None else (0 if r.random() < 0.04 else r.choice(SIZES))
        self.sizes[name] = v
        self.alt_sizes[name] = v if (v in (0, 1) and r.random() < 0.7) or r.random() < 0.3 else r.choice(SIZES[1:])
        return name

    def new_input(self, dims=None, dtype=None, layout=None, fill=None):
        r = self.rng
        if dims is None:
            rank = r.choice((0, 1, 2, 2, 3, 3, 4))
            syms = list(self.sizes)
            dims = [r.choice(syms) if syms and r.random() < 0.5 else self.sym() for _ in range(rank)]
        if dtype is None:
            names, weights = zip(*DTYPE_WEIGHTS)
            dtype = r.choices(names, weights)[0]
        if layout is None:
            layout = r.choice(LAYOUTS)
            if layout == "channels_last" and len(dims) != 4:
                layout = "contig"
        spec = {"dims": dims, "dtype": dtype, "layout": layout, "fill": fill or r.choice(FILLS)}
        if layout == "expand" and dims:
            spec["expand_dims"] = [r.randrange(len(dims))]
        name = f"x{len(self.inputs)}"
        self.inputs.append(spec)
        self.input_names.append(name)
        self.ns[name] = make_input(spec, self.sizes, self.seed * 1000 + len(self.inputs) - 1)
        if self.grad and self.ns[name].is_floating_point() and not _no_grad_spec(spec):
            self.ns[name].requires_grad_()
        if self.ns[name].is_floating_point():
            self.float_dtypes.add(spec["dtype"])
        self.vars.append(name)
        return name

    def new_alias_input(self, j, view):
        """An input that is `view` (an expression of x) of input j: aliased arguments."""
        t = eval(view, {"x": self.ns[self.input_names[j]], "torch": self.torch})  # noqa: S307
        spec = {"dims": list(t.shape), "dtype": self.inputs[j]["dtype"], "layout": "alias", "fill": "alias",
                "alias": j, "view": view}
        name = f"x{len(self.inputs)}"
        self.inputs.append(spec)
        self.input_names.append(name)
        self.ns[name] = t
        self.vars.append(name)
        return name

    def no_grad_input(self, name):
        self.inputs[self.input_names.index(name)]["nograd"] = True
        self.ns[name] = self.ns[name].detach()
        return name

    def new_module_name(self):
        return f"m{len(self.setup)}"

    # ----- picking operands
    def t(self, name):
        return eval(name, self.ns)  # noqa: S307 - the generator's own expressions

    def pick(self, pred=None, recent=0.6):
        cands = [v for v in self.vars if pred is None or pred(self.t(v))]
        if not cands:
            return None
        if self.rng.random() < recent:
            return cands[-1]
        return self.rng.choice(cands)

    def pick_float(self, min_rank=0, max_rank=8):
        return self.pick(lambda t: t.is_floating_point() and min_rank <= t.dim() <= max_rank)

    def dim(self, t, allow_neg=True):
        d = self.rng.randrange(t.dim())
        return d - t.dim() if allow_neg and self.rng.random() < 0.4 else d

    def scalar(self):
        return self.rng.choice(("2", "-3", "0", "0.5", "-0.0", "inf", "-inf", "nan", "True", "1e4",
                                "255", "-1", "1.5", "3"))

    # ----- running one line
    def _saved(self, v):
        if not isinstance(v, self.torch.Tensor):
            return v
        try:
            if v.requires_grad and v.is_leaf:
                return v.detach().clone(memory_format=self.torch.preserve_format).requires_grad_()
            return v.clone()
        except RuntimeError:      # an autograd view invalidated by an in-place op (--grad)
            return v

    def try_line(self, text, family, new=True, setup=None):
        torch = self.torch
        name = f"v{len(self.lines)}"
        stmt = f"{name} = {text}" if new else text
        if self.exact_saves and not self.grad:
            # copies with the exact layout (an expanded input stays expanded: its in-place ops
            # keep raising as at run time) and which of them view one storage (aliased inputs)
            saved = dict(zip(self.vars, opinfo._clone([self.ns[k] for k in self.vars])))
        else:
            saved = {k: self._saved(self.ns[k]) for k in self.vars}
        try:
            with (torch.enable_grad() if self.grad else torch.no_grad()):
                if setup is not None:
                    exec(setup_statement(setup, self.seed, len(self.setup)), self.ns)  # noqa: S102
                torch.manual_seed(CALL_SEED + len(self.lines))
                exec(stmt, self.ns)  # noqa: S102 - the generator's own statement
            if new:
                v = self.ns[name]
                if not isinstance(v, torch.Tensor) or v.numel() > MAX_NUMEL or v.is_complex() \
                        or v.layout != torch.strided:
                    raise ValueError("unsuitable result")
                if v.is_floating_point():
                    self.float_dtypes.add(str(v.dtype).split(".")[1])
        except Exception:  # noqa: BLE001 - eager rejects this op here: draw another
            for k, v in saved.items():
                if isinstance(v, torch.Tensor):
                    self.ns[k] = v
            self.ns.pop(name, None)
            return False
        if setup is not None:
            self.setup.append(setup)
        self.lines.append(stmt)
        self.families.append(family)
        if new:
            self.vars.append(name)
        return True


# ----- op families: each returns the text of an expression (or a statement with new=False)

U_FLOAT = ("torch.exp({})", "torch.log({})", "torch.sqrt({})", "torch.rsqrt({})", "torch.sin({})",
           "torch.cos({})", "torch.tanh({})", "torch.sigmoid({})", "torch.erf({})", "torch.log1p({})",
           "torch.expm1({})", "F.gelu({})", "F.gelu({}, approximate='tanh')", "F.silu({})",
           "F.softplus({})", "F.elu({})", "F.leaky_relu({}, 0.1)", "F.hardswish({})", "F.mish({})",
           "torch.reciprocal({})", "{}.frac()", "torch.atan({})", "torch.asin({})", "torch.exp2({})",
           "F.relu6({})", "torch.logit({}, eps=1e-3)", "F.hardsigmoid({})", "torch.tan({})")
U_ANY = ("torch.abs({})", "torch.neg({})", "torch.relu({})", "torch.sign({})", "torch.floor({})",
         "torch.ceil({})", "torch.round({})", "torch.trunc({})", "torch.square({})", "torch.isnan({})",
         "torch.isinf({})", "torch.isfinite({})", "torch.nan_to_num({})",
         "torch.nan_to_num({}, nan=0.0, posinf=1.0, neginf=-1.0)", "torch.logical_not({})",
         "torch.bitwise_not({})", "{}.float()", "{}.double()", "{}.to(torch.bfloat16)", "{}.half()",
         "{}.bool()", "torch.signbit({})", "{}.clone()", "{}.contiguous()", "{}.long()",
         "torch.nan_to_num({}).clamp(-1000, 1000).to(torch.int32)", "{}.to(torch.uint8)",
         "torch.round({}, decimals=1)", "{}.abs().sqrt()", "(-{})")


def fam_unary(g):
    a = g.pick()
    if a is None:
        return None
    t = g.t(a)
    if t.is_floating_point() and g.rng.random() < 0.6:
        return g.rng.choice(U_FLOAT).format(a)
    e = g.rng.choice(U_ANY)
    if t.is_floating_point() and (".long()" in e or "uint8" in e):
        return None      # float -> int of out-of-range values is undefined behaviour in eager
    return e.format(a)


BINARY = ("{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / {b}", "torch.floor_divide({a}, {b})",
          "torch.remainder({a}, {b})", "torch.fmod({a}, {b})", "torch.pow({a}, {b})",
          "torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "torch.fmax({a}, {b})",
          "torch.fmin({a}, {b})", "torch.atan2({a}, {b})", "{a} == {b}", "{a} < {b}", "{a} >= {b}",
          "{a} != {b}", "torch.logical_and({a}, {b})", "torch.logical_or({a}, {b})",
          "torch.bitwise_and({a}, {b})", "{a} | {b}", "{a} ^ {b}", "torch.add({a}, {b}, alpha=2)",
          "torch.sub({a}, {b}, alpha=3)", "torch.hypot({a}, {b})", "torch.copysign({a}, {b})",
          "torch.xlogy({a}, {b})", "torch.addcmul({a}, {a}, {b}, value=0.5)",
          "torch.div({a}, {b}, rounding_mode='floor')", "torch.div({a}, {b}, rounding_mode='trunc')",
          "{a} << {b}", "{a} >> {b}", "torch.lerp({a}, {b}, 0.25)", "torch.clamp({a}, min={b})",
          "torch.true_divide({a}, {b})", "torch.heaviside({a}, {b})")


def operand_b(g, a):
    r = g.rng
    t = g.t(a)
    k = r.random()
    if k < 0.3:
        return g.scalar()
    if k < 0.4:
        return f"torch.tensor({g.scalar()})"
    if k < 0.5 and t.dim() >= 1:
        return f"{a}[..., :1]"
    if k < 0.6 and t.dim() >= 1 and t.is_floating_point():
        return f"{a}.mean(-1, keepdim=True)"
    torch = g.torch

    def fits(u):
        try:
            torch.broadcast_shapes(u.shape, t.shape)
            return True
        except RuntimeError:
            return False
    b = g.pick(fits, recent=0.2)
    return b or g.scalar()


def fam_binary(g):
    a = g.pick()
    if a is None:
        return None
    b = operand_b(g, a)
    e = g.rng.choice(BINARY)
    if g.rng.random() < 0.2 and not b[0].isalpha():
        return e.format(a=b, b=a) if e.startswith("{a} ") else e.format(a=a, b=b)
    return e.format(a=a, b=b)


def dims_arg(g, t):
    r = g.rng
    if t.dim() == 0:
        return None
    if r.random() < 0.3 and t.dim() >= 2:
        ds = r.sample(range(t.dim()), 2)
        return "[" + ", ".join(str(d - t.dim() if r.random() < 0.3 else d) for d in ds) + "]"
    return str(g.dim(t))


def fam_reduce(g):
    a = g.pick()
    if a is None:
        return None
    t = g.t(a)
    r = g.rng
    kd = r.choice(("True", "False"))
    d = dims_arg(g, t)
    if d is None or r.random() < 0.15:
        return r.choice((f"{a}.sum()", f"{a}.amax()", f"{a}.mean()", f"{a}.max()", f"{a}.min()",
                         f"{a}.any()", f"{a}.all()", f"{a}.prod()", f"{a}.argmax()", f"{a}.nansum()",
                         f"{a}.sum(dtype=torch.float64)", f"torch.count_nonzero({a})", f"{a}.std()",
                         f"torch.linalg.vector_norm({a})"))
    one = str(g.dim(t))
    return r.choice((f"{a}.sum({d}, keepdim={kd})", f"{a}.mean({d}, keepdim={kd})",
                     f"{a}.amax({d}, keepdim={kd})", f"{a}.amin({d}, keepdim={kd})",
                     f"{a}.prod({one}, keepdim={kd})", f"torch.max({a}, {one}, keepdim={kd})[0]",
                     f"torch.min({a}, {one})[1]", f"{a}.argmax({one}, keepdim={kd})",
                     f"{a}.argmin({one})", f"{a}.std({d}, keepdim={kd})", f"{a}.var({d}, correction=0)",
                     f"torch.linalg.vector_norm({a}, 2, {d}, {kd})", f"torch.logsumexp({a}, {d})",
                     f"{a}.any({one})", f"{a}.all({one}, keepdim={kd})", f"torch.count_nonzero({a}, {d})",
                     f"{a}.sum({d}, dtype=torch.float32)", f"torch.aminmax({a}, dim={one})[1]",
                     f"{a}.norm(1, {one})", f"torch.nanmean({a}, {d})"))


def fam_view(g):
    a = g.pick()
    if a is None:
        return None
    t = g.t(a)
    r = g.rng
    n = t.dim()
    opts = [f"{a}.reshape(-1)", f"{a}.view(-1)", f"{a}.unsqueeze({r.randint(-n - 1, n)})",
            f"{a}.reshape({a}.shape[0], -1)" if n else f"{a}.reshape(1, 1)"]
    if t.dtype.itemsize in (2, 4, 8) and t.dtype != g.torch.bool:
        other = {2: ("torch.int16", "torch.bfloat16", "torch.float16"), 4: ("torch.int32", "torch.float32"),
                 8: ("torch.int64", "torch.float64")}[t.dtype.itemsize]
        if not t.is_floating_point():
            opts.append(f"{a}.view({r.choice(other)})")
    if n >= 1:
        d = g.dim(t)
        size = t.shape[d]
        opts += [f"{a}.flip({d})", f"torch.roll({a}, {r.randint(-3, 3)}, {d})",
                 f"{a}[..., ::2]", f"{a}[1:]", f"{a}.select({d}, {r.randint(-1, max(size - 1, 0))})",
                 f"{a}[{r.randint(-1, max(t.shape[0] - 1, 0))}]", f"{a}.squeeze({d})",
                 f"{a}.narrow({d}, {r.randint(0, max(size - 1, 0))}, {r.randint(0, 2)})",
                 f"{a}.unfold({d}, {r.randint(1, 3)}, {r.randint(1, 2)})",
                 f"{a}.repeat({', '.join(str(r.choice((1, 1, 2))) for _ in range(n))})",
                 f"{a}.unsqueeze(0).expand(2, *{a}.shape)", f"{a}.expand(3, *{a}.shape)",
                 f"{a}.contiguous().as_strided(({max(t.numel() - 1, 0)}, 2), (1, 1))",
                 f"{a}.as_strided(({max(t.numel() // 2, 0)},), (2,), 0)",
                 f"{a}.flatten()[{r.randint(0, 2)}::{r.randint(1, 3)}]",
                 f"{a}[..., None, {r.randint(-1, 1)}:]"]
        if size >= 2:
            opts.append(f"{a}.unflatten({d}, (2, -1))")
    if n >= 2:
        perm = list(range(n))
        r.shuffle(perm)
        d0, d1 = r.sample(range(n), 2)
        opts += [f"{a}.permute({', '.join(map(str, perm))})", f"{a}.transpose({d0}, {d1})", f"{a}.mT",
                 f"{a}.diagonal({r.randint(-1, 1)}, {d0}, {d1})", f"{a}.flatten({min(d0, d1)}, {max(d0, d1)})",
                 f"{a}[:, {r.randint(0, 2)}::{r.randint(1, 3)}]", f"{a}.movedim(0, -1)",
                 f"{a}.transpose({d0}, {d1}).reshape(-1)", f"{a}.transpose({d0}, {d1}).contiguous().view(-1)",
                 f"{a}.permute({', '.join(map(str, perm))}).contiguous()"]
    return r.choice(opts)


def fam_cat(g):
    a = g.pick()
    if a is None:
        return None
    t = g.t(a)
    r = g.rng
    if t.dim() == 0:
        return f"torch.stack([{a}, {a} * 2])"
    d = g.dim(t)
    same = g.pick(lambda u: u.shape == t.shape and u is not t, recent=0.2) or f"({a} * 2)"
    return r.choice((f"torch.cat([{a}, {same}], {d})", f"torch.stack([{a}, {same}], {d})",
                     f"torch.cat([{a}, {a}[:0]])", f"torch.split({a}, {r.randint(1, 3)}, {d})[{r.choice((0, -1))}]",
                     f"{a}.chunk({r.randint(1, 3)}, {d})[-1]", f"torch.unbind({a}, {d})[0]",
                     f"torch.cat([{a}, {a}.narrow({d}, 0, 1)], {d})", f"torch.hstack([{a}, {same}])",
                     f"torch.cat([{a}.float(), {same}], {d})",
                     f"torch.split({a}, [1, {a}.shape[{d}] - 1], {d})[1]"))


def int_index(g, size, n):
    """A constant index tensor of n distinct valid positions of a dim of `size` (some negative)."""
    r = g.rng
    if size == 0:
        return "torch.tensor([], dtype=torch.long)"
    pos = r.sample(range(size), min(n, size))
    pos = [p - size if r.random() < 0.3 else p for p in pos]
    return f"torch.tensor({pos})"


def input_index(g, size):
    """An index from an integer input (bounds-checked indices), kept in range with remainder."""
    ii = g.pick(lambda u: not u.is_floating_point() and u.dtype != g.torch.bool and 1 <= u.dim() <= 2, recent=0.3)
    if ii is None or size == 0:
        return None
    return f"({ii}.long().flatten()[:4] % {size})"


def fam_index(g):
    a = g.pick(lambda u: u.dim() >= 1)
    if a is None:
        return None
    t = g.t(a)
    r = g.rng
    d = g.dim(t, allow_neg=False)
    size = t.shape[d]
    idx = int_index(g, size, r.randint(1, 3))
    opts = [f"{a}[{idx}]" if d == 0 else f"{a}[:, {idx}]" if d == 1 else f"{a}[..., {idx}]",
            f"torch.index_select({a}, {d}, {idx})", f"{a}[{a} > 0]" if t.dtype != g.torch.bool else f"{a}[{a}]",
            f"{a}[[0, -1]]", f"{a}[{r.randint(0, 1)}, ..., None]", f"{a}[..., {r.randint(-1, 0)}]",
            f"torch.masked_select({a}, {a} != 0)", f"{a}[{a}.bool()].sum()" if t.dtype != g.torch.bool else f"{a}.sum()"]
    ii = input_index(g, size)
    if ii:
        opts += [f"torch.index_select({a}, {d}, {ii})", f"{a}[{ii}]" if d == 0 else f"{a}.index_select({d}, {ii})"]
    if t.dim() >= 1 and size:
        gi = f"torch.randint(0, {size}, {tuple(t.shape)})".replace(",)", ",)")
        opts += [f"torch.gather({a}, {d}, {gi})", f"torch.take_along_dim({a}, {a}.argsort({d}, stable=True), {d})"]
    return r.choice(opts)


def fam_inplace(g):
    """An in-place op on an input, a view of an input, or an intermediate (aliasing)."""
    r = g.rng
    base = g.pick(recent=0.2) if r.random() < 0.3 else (
        r.choice(g.input_names) if g.input_names else None)
    if base is None:
        return None
    t = g.t(base)
    views = [base]
    if t.dim() >= 1:
        views += [f"{base}[1:]", f"{base}[..., ::2]", f"{base}.view(-1)", f"{base}.unsqueeze(0)",
                  f"{base}[0]", f"{base}.narrow(-1, 0, 1)"]
    if t.dim() >= 2:
        views += [f"{base}.t()" if t.dim() == 2 else f"{base}.transpose(0, 1)", f"{base}.diagonal()",
                  f"{base}[:, 1]"]
    v = r.choice(views)
    s = g.scalar() if r.random() < 0.6 else "1"
    opts = [f"{v}.add_({s})", f"{v}.mul_({s})", f"{v}.clamp_(min=0)", f"{v}.zero_()", f"{v}.fill_({s})",
            f"{v}.relu_()", f"{v}.neg_()", f"{v}.sub_({v}.mean())", f"{v}.div_(2)", f"{v}.abs_()",
            f"{v}[...] = {s}", f"{v}.copy_({v}.flip(-1))" if t.dim() else f"{v}.copy_({v} * 2)",
            f"{v}.masked_fill_({v} > 0, {s})" if t.dtype != g.torch.bool else f"{v}.masked_fill_({v}, False)",
            f"{v}.sigmoid_()", f"{v}.add_({v})", f"{v}.lerp_({v}.flip(0), 0.5)" if t.dim() else f"{v}.exp_()",
            f"{v}.uniform_()", f"{v}.bernoulli_(0.5)", f"{v}.exponential_()"]
    if t.dim() >= 1 and t.shape[0]:
        size = t.shape[0]
        idx = int_index(g, size, r.randint(1, 2))
        opts += [f"{base}.index_put_(({idx},), torch.tensor({s}))",
                 f"{base}.index_put_(({idx},), {base}[{idx}] * 2, accumulate=True)",
                 f"{base}[{idx}] = {s}", f"{base}.index_fill_(0, {idx}, {s})",
                 f"{base}.index_add_(0, {idx}, {base}[{idx}])"]
        ii = input_index(g, size)
        if ii:
            opts += [f"{base}.index_put_(({ii},), torch.tensor({s}), accumulate=True)",
                     f"{base}.index_add_(0, {ii}, {base}[{ii}])"]
        if t.dim() == 1 or (t.dim() >= 1 and r.random() < 0.5):
            src_shape = (min(2, size),) + tuple(t.shape[1:])
            perm = r.sample(range(size), min(2, size))
            sc = f"torch.tensor({perm}).view({-1 if t.dim() == 1 else ', '.join(['-1'] + ['1'] * (t.dim() - 1))}).expand({', '.join(map(str, src_shape))})"
            opts += [f"{base}.scatter_(0, {sc}, {s})", f"{base}.scatter_add_(0, {sc}, {base}[:{len(perm)}])",
                     f"{base}.scatter_reduce_(0, {sc}, {base}[:{len(perm)}], 'amax')"]
    stmt = r.choice(opts)
    if "=" in stmt.split("(")[0]:
        return ("stmt", stmt)
    return ("stmt", stmt) if r.random() < 0.5 else stmt


def fam_matmul(g):
    a = g.pick(lambda u: u.dim() >= 1 and (u.is_floating_point() or u.dtype == g.torch.int64))
    if a is None:
        return None
    t = g.t(a)
    r = g.rng
    k = g.sym(t.shape[-1])
    n = g.sym()
    dt = str(t.dtype).split(".")[1] if r.random() < 0.9 else r.choice(FLOATS)
    kind = r.randrange(7)
    if kind == 0:
        w = g.new_input([k, n], dt)
        return f"{a} @ {w}"
    if kind == 1:
        w = g.new_input([n, k], dt)
        b = g.new_input([n], dt) if r.random() < 0.5 else "None"
        return f"F.linear({a}, {w}, {b})"
    if kind == 2 and t.dim() == 3:
        b0 = g.sym(t.shape[0])
        w = g.new_input([b0, k, n], dt)
        return f"torch.bmm({a}, {w})"
    if kind == 3:
        w = g.new_input([k, n], dt)
        return f"torch.einsum('...k,kn->...n', {a}, {w})"
    if kind == 4 and t.dim() >= 2:
        return f"{a} @ {a}.mT"
    if kind == 5 and t.dim() >= 2:
        return f"torch.einsum('...ij,...kj->...ik', {a}, {a})"
    w = g.new_input([k], dt)
    return f"torch.matmul({a}, {w})"


def fam_norm(g):
    a = g.pick_float(min_rank=1)
    if a is None:
        return None
    t = g.t(a)
    r = g.rng
    dt = str(t.dtype).split(".")[1]
    kind = r.randrange(8)
    last = g.sym(t.shape[-1])
    if kind == 0:
        w = g.new_input([last], dt) if r.random() < 0.5 else "None"
        b = g.new_input([last], dt) if r.random() < 0.5 else "None"
        return f"F.layer_norm({a}, {a}.shape[-1:], {w}, {b})"
    if kind == 1:
        w = g.new_input([last], dt) if r.random() < 0.5 else "None"
        return f"F.rms_norm({a}, {a}.shape[-1:], {w})"
    if kind == 2 and t.dim() >= 2:
        c = t.shape[1]
        groups = r.choice([d for d in (1, 2, 3, 4) if c % d == 0] or [1])
        return f"F.group_norm({a}, {groups})"
    if kind == 3 and t.dim() >= 2:
        c = g.sym(t.shape[1])
        rm = g.new_input([c], "float32", "contig", "normal")
        rv = g.new_input([c], "float32", "contig", "positive")
        tr = r.choice(("True", "False"))
        w = g.new_input([c], "float32", "contig") if r.random() < 0.5 else "None"
        return f"F.batch_norm({a}, {rm}, {rv}, {w}, None, training={tr}, momentum=0.1)"
    if kind == 4 and t.dim() >= 3:
        return f"F.instance_norm({a})"
    if kind == 5:
        return f"F.normalize({a}, dim={g.dim(t)})"
    return f"torch.softmax({a}, {g.dim(t)})"


def fam_softmax(g):
    a = g.pick(lambda u: u.dim() >= 1 and (u.is_floating_point() or g.rng.random() < 0.2))
    if a is None:
        return None
    t = g.t(a)
    d = g.dim(t)
    return g.rng.choice((f"torch.softmax({a}, {d})", f"F.log_softmax({a}, {d})",
                         f"torch.softmax({a}, {d}, dtype=torch.float32)", f"F.softmin({a}, {d})",
                         f"torch.log_softmax({a}.float(), {d})"))


def fam_where(g):
    a = g.pick()
    if a is None:
        return None
    r = g.rng
    b = operand_b(g, a)
    c = g.pick(lambda u: u.dtype == g.torch.bool, recent=0.3) or f"({a} > 0)"
    lo, hi = r.choice((("0", "1"), ("-1.5", "nan"), ("None", "0"), ("-inf", "2"), ("0.5", "-0.5"), ("-0.0", "0.0")))
    return r.choice((f"torch.where({c}, {a}, {b})", f"torch.where({a} != {a}, 0.0, {a})",
                     f"torch.clamp({a}, {lo}, {hi})", f"{a}.clamp(min={b})", f"torch.clamp_min({a}, {lo})",
                     f"F.hardtanh({a})", f"torch.max({a}, {b})" if not b[0].isdigit() and b[0] != "-" else f"torch.max({a})",
                     f"torch.min({a}, torch.tensor({g.scalar()}))", f"torch.where({c}, {a}, {g.scalar()})",
                     f"{a}.masked_fill({c}, {g.scalar()})", f"torch.clamp({a}, max={b})"))


def fam_scan(g):
    a = g.pick(lambda u: u.dim() >= 1)
    if a is None:
        return None
    t = g.t(a)
    r = g.rng
    d = g.dim(t)
    k = r.randint(1, max(1, min(3, t.shape[d])))
    return r.choice((f"torch.cumsum({a}, {d})", f"torch.cumprod({a}, {d})", f"torch.cummax({a}, {d})[0]",
                     f"torch.cummin({a}, {d})[1]", f"torch.logcumsumexp({a}, {d})",
                     f"torch.sort({a}, {d}, stable=True)[0]", f"torch.sort({a}, {d}, descending=True, stable=True)[1]",
                     f"torch.topk({a}, {k}, {d})[0]", f"torch.argsort({a}, {d}, stable=True)",
                     f"torch.kthvalue({a}, {k}, {d})[0]", f"{a}.argmax({d})", f"torch.msort({a})",
                     f"torch.cumsum({a}, {d}, dtype=torch.float64)", f"torch.topk({a}, {k}, {d}, largest=False)[0]",
                     f"torch.diff({a}, dim={d})"))


def fam_conv(g):
    r = g.rng
    a = g.pick_float(min_rank=3, max_rank=4)
    if a is None:
        a = g.new_input([g.sym(2), g.sym(), g.sym(), g.sym()][: r.choice((3, 4))], r.choice(("float32", "float32", "bfloat16", "float64")))
    t = g.t(a)
    dt = str(t.dtype).split(".")[1]
    nd = t.dim() - 2
    cin = t.shape[1]
    groups = r.choice([d for d in (1, 2, 3) if cin % d == 0] or [1])
    cout = groups * r.randint(1, 3)
    k = r.randint(1, 3)
    w = g.new_input([cout, g.sym(cin) if groups == 1 else max(cin // groups, 1)] + [k] * nd, dt)
    b = g.new_input([cout], dt) if r.random() < 0.5 else "None"
    pad = r.choice(("0", "1", "'same'"))
    stride = "1" if pad == "'same'" else r.choice(("1", "2"))
    dil = r.choice(("1", "1", "2"))
    return f"F.conv{nd}d({a}, {w}, {b}, stride={stride}, padding={pad}, dilation={dil}, groups={groups})"


def fam_pool(g):
    r = g.rng
    a = g.pick_float(min_rank=3, max_rank=4)
    if a is None:
        return None
    t = g.t(a)
    nd = t.dim() - 2
    k = r.randint(1, 3)
    s = r.randint(1, 2)
    p = r.randint(0, k // 2)
    cm = r.choice(("True", "False"))
    return r.choice((f"F.max_pool{nd}d({a}, {k}, {s}, {p}, ceil_mode={cm})",
                     f"F.avg_pool{nd}d({a}, {k}, {s}, {p}, ceil_mode={cm}, count_include_pad={r.choice(('True', 'False'))})",
                     f"F.adaptive_avg_pool{nd}d({a}, {r.randint(1, 3)})",
                     f"F.adaptive_max_pool{nd}d({a}, {r.randint(1, 3)})",
                     f"F.max_pool{nd}d({a}, {k}, {s}, {p}, return_indices=True)[1]",
                     f"F.lp_pool{nd}d({a}, 2, {k})"))


def fam_interp(g):
    r = g.rng
    a = g.pick_float(min_rank=3, max_rank=4)
    if a is None:
        a = g.pick(lambda u: u.dim() >= 1)
        if a is None:
            return None
        t = g.t(a)
        pads = ", ".join(str(r.randint(-1, 2)) for _ in range(2 * min(t.dim(), 2)))
        return f"F.pad({a}, ({pads}), value={g.scalar()})"
    t = g.t(a)
    nd = t.dim() - 2
    mode = r.choice(("nearest", "nearest-exact") + (("linear",) if nd == 1 else ("bilinear", "bicubic")))
    ac = "" if mode.startswith("nearest") else f", align_corners={r.choice(('True', 'False'))}"
    size = r.choice((f"scale_factor={r.choice(('2', '1.5', '0.5', '3'))}",
                     f"size={tuple(r.randint(1, 9) for _ in range(nd))}"))
    pads = ", ".join(str(r.randint(-1, 2)) for _ in range(2 * nd))
    pmode = r.choice(("'constant'", "'reflect'", "'replicate'", "'circular'"))
    return r.choice((f"F.interpolate({a}, {size}, mode='{mode}'{ac})",
                     f"F.pad({a}, ({pads}), mode={pmode})", f"F.pad({a}, ({pads}), value={g.scalar()})",
                     f"F.pixel_shuffle({a}, 2)" if nd == 2 else f"F.interpolate({a}, scale_factor=2)"))


def fam_rng(g):
    a = g.pick()
    r = g.rng
    if a is None:
        return "torch.rand(3, 4)"
    t = g.t(a)
    fa = a if t.is_floating_point() else f"{a}.float()"
    return r.choice((f"torch.rand_like({fa})", f"torch.randn_like({fa})", f"F.dropout({fa}, 0.3, training=True)",
                     f"torch.bernoulli(torch.full_like({fa}, 0.5))", f"torch.randint_like({a}, 0, 10)",
                     f"{fa} + torch.rand({tuple(t.shape[-1:])})", f"torch.randperm({max(1, min(t.numel(), 16))})",
                     f"{fa}.clone().uniform_(-1, 1)", f"torch.normal({fa}, 1.0)",
                     f"F.dropout({fa}, 0.5, training=True) * torch.rand_like({fa})"))


def fam_const(g):
    r = g.rng
    a = g.pick()
    n = r.randint(0, 5)
    opts = [f"torch.zeros({n}, {r.randint(1, 3)})", f"torch.arange({n})", f"torch.full((2, {n}), {g.scalar()})",
            f"torch.eye({n})", f"torch.linspace(0, 1, {n})", "torch.tensor([1.0, nan, -0.0, inf])",
            f"torch.ones({n}, dtype=torch.{r.choice(FLOATS + INTS + ('bool',))})", "torch.empty(0)"]
    if a is not None:
        opts += [f"{a}.new_ones(2, {n})", f"torch.full_like({a}, 3)", f"torch.zeros_like({a})",
                 f"{a} + torch.arange({g.t(a).shape[-1] if g.t(a).dim() else 1})",
                 f"{a}.new_tensor([1, 2])", f"torch.ones_like({a}) * {a}.shape[0]" if g.t(a).dim() else f"{a} * 1"]
    return r.choice(opts)


FAMILIES = {"unary": (fam_unary, 10), "binary": (fam_binary, 12), "reduce": (fam_reduce, 7),
            "view": (fam_view, 10), "cat": (fam_cat, 4), "index": (fam_index, 5),
            "inplace": (fam_inplace, 7), "matmul": (fam_matmul, 4), "norm": (fam_norm, 4),
            "softmax": (fam_softmax, 3), "where": (fam_where, 5), "scan": (fam_scan, 4),
            "conv": (fam_conv, 2), "pool": (fam_pool, 2), "interp": (fam_interp, 2),
            "rng": (fam_rng, 2), "const": (fam_const, 2)}


# --------------------------------------------------------------------------- generator v2 families
# Selectable with --families GROUP (or family names); the default (v1: FAMILIES above) draws
# none of them, so a seed's v1 program is unchanged. Programs of these groups also run at a
# fourth input set (the first shapes, other values), and their modules' state (buffers, and
# gradients under --grad) is compared with eager's after every call.

INT_DTYPES = ("int8", "uint8", "int16", "int32", "int64", "bool")
ALL_DTYPES = INT_DTYPES + ("float16", "bfloat16", "float32", "float64")
INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-2**31, 2**31 - 1),
             "int64": (-2**62, 2**62), "bool": (0, 1)}

# Defined in the namespace of every module program (and printed by repro): a residual wrapper,
# the custom nn.Module of the module family.
MODULE_PRELUDE = '''
class Residual(torch.nn.Module):
    def __init__(self, *mods):
        super().__init__()
        self.body = torch.nn.Sequential(*mods)

    def forward(self, x):
        y = self.body(x)
        return x + y if y.shape == x.shape else y
'''

ACTIVATIONS = ("ReLU()", "ReLU6()", "LeakyReLU(0.2)", "PReLU()", "RReLU().eval()", "ELU(0.7)", "SELU()",
               "CELU(1.3)", "GELU()", "GELU(approximate='tanh')", "SiLU()", "Mish()", "Sigmoid()", "Tanh()",
               "Hardtanh(-2.0, 1.5)", "Hardswish()", "Hardsigmoid()", "Hardshrink(0.6)", "Softshrink(0.3)",
               "Tanhshrink()", "Softplus(beta=2.0, threshold=5.0)", "Softsign()", "LogSigmoid()",
               "Threshold(0.1, -2.0)", "Softmax(1)", "LogSoftmax(-1)", "Softmin(1)", "Identity()",
               "Dropout(0.3).eval()", "AlphaDropout(0.2).eval()", "Dropout2d(0.5).eval()",
               "FeatureAlphaDropout(0.3).eval()")


def _module_text(g, t):
    """The constructor text of one module that takes t (a float tensor [N, C, *spatial]), or None."""
    r = g.rng
    n = t.dim() - 2
    c = t.shape[1] if t.dim() >= 2 else 0
    kinds = ["act", "act", "linear"]
    if 1 <= n <= 3 and c:
        kinds += ["conv", "conv", "convT", "bn", "gn", "inorm", "pool", "pool", "adapt", "upsample"]
    if n == 2 and c:
        kinds += ["shuffle", "lppool"]
    if t.dim() >= 2:
        kinds += ["ln", "flatten"]
    kind = r.choice(kinds)
    if kind == "act":
        e = r.choice(ACTIVATIONS)
        if e == "PReLU()" and c and r.random() < 0.5:
            e = f"PReLU({c})"
        if e == "Dropout2d(0.5).eval()" and n:
            e = f"Dropout{min(n, 3)}d(0.5).eval()"
        return "torch.nn." + e
    if kind == "linear":
        return f"torch.nn.Linear({t.shape[-1]}, {r.randint(1, 6)}, bias={r.random() < 0.7})"
    if kind == "flatten":
        return f"torch.nn.Flatten({r.randint(1, t.dim() - 1)})"
    if kind == "ln":
        k = r.choice((1, 1, 2)) if t.dim() >= 3 else 1
        shape = tuple(t.shape[-k:])
        return (f"torch.nn.LayerNorm({shape}, eps={r.choice(('1e-5', '1e-3'))}, "
                f"elementwise_affine={r.random() < 0.7}, bias={r.random() < 0.7})")
    divs = [d for d in (1, 2, 3, 4) if c % d == 0]
    if kind in ("conv", "convT"):
        groups = r.choice(divs)
        cout = groups * r.randint(1, 3)
        k = r.randint(1, 3)
        dil = r.choice((1, 1, 2))
        bias = r.random() < 0.7
        if kind == "conv":
            pm = r.choice(("zeros", "zeros", "reflect", "replicate", "circular"))
            pad = r.choice(("0", "1", "'same'", "'valid'", "2"))
            stride = 1 if pad == "'same'" else r.choice((1, 1, 2))
            return (f"torch.nn.Conv{n}d({c}, {cout}, {k}, stride={stride}, padding={pad}, dilation={dil}, "
                    f"groups={groups}, bias={bias}, padding_mode='{pm}')")
        stride = r.choice((1, 2, 2))
        op = r.randrange(max(stride, dil))
        return (f"torch.nn.ConvTranspose{n}d({c}, {cout}, {k}, stride={stride}, padding={r.randint(0, 1)}, "
                f"output_padding={op}, groups={groups}, bias={bias}, dilation={dil})")
    mode = r.choice((".train()", ".eval()"))
    if kind == "bn":
        return (f"torch.nn.BatchNorm{max(n, 1)}d({c}, momentum={r.choice(('0.1', '0.5', 'None'))}, "
                f"affine={r.random() < 0.7}, track_running_stats={r.random() < 0.8}){mode}")
    if kind == "gn":
        return f"torch.nn.GroupNorm({r.choice(divs)}, {c}, affine={r.random() < 0.7})"
    if kind == "inorm":
        return (f"torch.nn.InstanceNorm{n}d({c}, affine={r.random() < 0.5}, "
                f"track_running_stats={r.random() < 0.3}){mode}")
    if kind == "pool":
        k = r.randint(1, 3)
        s = r.randint(1, 2)
        p = r.randint(0, k // 2)
        cm = r.random() < 0.4
        if r.random() < 0.5:
            ri = r.random() < 0.3
            return (f"torch.nn.MaxPool{n}d({k}, {s}, {p}, dilation={r.choice((1, 1, 2))}, ceil_mode={cm}, "
                    f"return_indices={ri})" + ("|idx" if ri else ""))
        div = f", divisor_override={r.choice((None, 2))}" if n > 1 else ""
        return f"torch.nn.AvgPool{n}d({k}, {s}, {p}, ceil_mode={cm}, count_include_pad={r.random() < 0.5}{div})"
    if kind == "adapt":
        out = r.choice((1, 2, 3, 5))
        if r.random() < 0.5:
            return f"torch.nn.AdaptiveAvgPool{n}d({out})"
        ri = r.random() < 0.3
        return f"torch.nn.AdaptiveMaxPool{n}d({out}, return_indices={ri})" + ("|idx" if ri else "")
    if kind == "lppool":
        return f"torch.nn.LPPool2d({r.choice((1, 2, 3))}, {r.randint(1, 3)}, stride={r.randint(1, 2)}, ceil_mode={r.random() < 0.3})"
    if kind == "shuffle":
        if c % 4 == 0 and r.random() < 0.6:
            return "torch.nn.PixelShuffle(2)"
        return "torch.nn.PixelUnshuffle(2)"
    if kind == "upsample":
        modes = {1: ("nearest", "linear", "nearest-exact"), 2: ("nearest", "bilinear", "bicubic", "nearest-exact"),
                 3: ("nearest", "trilinear", "nearest-exact")}[n]
        mode = r.choice(modes)
        ac = "" if mode.startswith("nearest") else f", align_corners={r.random() < 0.5}"
        size = (f"scale_factor={r.choice(('2', '1.5', '0.5', '3', '2.3'))}" if r.random() < 0.6
                else f"size={tuple(r.randint(1, 7) for _ in range(n))}")
        if r.random() < 0.5:
            return f"torch.nn.Upsample({size}, mode='{mode}'{ac})"
        extra = ""
        if mode in ("bilinear", "bicubic") and r.random() < 0.4:
            extra = ", antialias=True"
        elif size.startswith("scale") and r.random() < 0.4:
            extra = ", recompute_scale_factor=True"
        return f"F.interpolate|{size}, mode='{mode}'{ac}{extra}"
    return None


def fam_module(g):
    """A module (or a Sequential / Residual stack of 1-3) built in the program's setup, applied to
    a float tensor; or an Embedding / EmbeddingBag of an integer input."""
    torch = g.torch
    r = g.rng
    if r.random() < 0.12:
        num = r.randint(3, 12)
        dim = r.randint(1, 6)
        idx = g.new_input([g.sym(), g.sym()], "int64", "contig", "class")
        g.inputs[-1]["high"] = num
        g.ns[idx] = make_input(g.inputs[-1], g.sizes, g.seed * 1000 + len(g.inputs) - 1)
        name = g.new_module_name()
        if r.random() < 0.5:
            pad = f", padding_idx={r.randint(-1, num - 1)}" if r.random() < 0.5 else ""
            mx = ", max_norm=1.0" if r.random() < 0.25 else ""
            return ("setup", f"{name} = torch.nn.Embedding({num}, {dim}{pad}{mx})", f"{name}({idx})")
        mode = r.choice(("sum", "mean", "max"))
        setup = f"{name} = torch.nn.EmbeddingBag({num}, {dim}, mode='{mode}')"
        if mode == "sum" and r.random() < 0.5:
            w = g.pick(lambda u: u.is_floating_point() and u.dim() == 2, recent=0.5)
            if w is not None and g.t(w).shape == g.t(idx).shape:
                return ("setup", setup, f"{name}({idx}, per_sample_weights={w})")
        return ("setup", setup, f"{name}({idx})")
    a = g.pick(lambda u: u.is_floating_point() and u.dim() >= 2 and u.dtype in (torch.float32, torch.float64))
    if a is None:
        return None
    t = g.t(a)
    texts = []
    cur = t
    for _ in range(r.choice((1, 1, 2, 3))):
        text = _module_text(g, cur)
        if text is None:
            break
        try:
            with torch.no_grad():
                cur = _apply_module_text(g, text, cur)
        except Exception:  # noqa: BLE001 - eager rejects it for this input: stop the stack here
            break
        texts.append(text)
        if cur.dim() < 2 or not cur.is_floating_point():
            break
    if not texts:
        return None
    name = g.new_module_name()
    dt = "" if t.dtype == torch.float32 else ".double()"
    if len(texts) == 1 and "|" not in texts[0]:
        return ("setup", f"{name} = {texts[0]}{dt}", f"{name}({a})")
    # a stack: module texts in a Sequential (or Residual); an interpolate or index step is a
    # lambda applied between them
    parts = []
    for tx in texts:
        if tx.startswith("F.interpolate|"):
            parts.append(("fn", f"lambda u: F.interpolate(u, {tx.split('|', 1)[1]})"))
        elif tx.endswith("|idx"):
            parts.append(("mod", tx[:-4]))
            parts.append(("fn", "lambda u: u[0]"))
        else:
            parts.append(("mod", tx))
    if all(k == "mod" for k, _ in parts):
        wrap = r.choice(("torch.nn.Sequential", "Residual"))
        return ("setup", f"{name} = {wrap}({', '.join(tx for _, tx in parts)}){dt}", f"{name}({a})")
    # a custom forward: modules in a ModuleList, functions between them
    mods = [tx for k, tx in parts if k == "mod"]
    fns = [tx for k, tx in parts if k == "fn"]
    setup = (f"{name} = torch.nn.ModuleList([{', '.join(mods)}]){dt}; "
             f"{name}_fns = [{', '.join(fns)}]")
    expr = a
    mi = fi = 0
    for k, _ in parts:
        if k == "mod":
            expr = f"{name}[{mi}]({expr})"
            mi += 1
        else:
            expr = f"{name}_fns[{fi}]({expr})"
            fi += 1
    return ("setup", setup, expr)


def _apply_module_text(g, text, t):
    import torch.nn.functional as F  # noqa: N812

    torch = g.torch
    if text.startswith("F.interpolate|"):
        return eval(f"F.interpolate(t, {text.split('|', 1)[1]})", {"F": F, "t": t})  # noqa: S307
    idx = text.endswith("|idx")
    m = eval(text[:-4] if idx else text, {"torch": torch, "F": F})  # noqa: S307
    if t.dtype == torch.float64:
        m = m.double()
    out = m(t)
    return out[0] if idx else out


def _target(g, like, kind, high=None, dtype=None):
    """A new input shaped like tensor `like` (its dims as symbols): class indices, probabilities,
    0/1 or +-1 labels."""
    dims = [g.sym(n) for n in like.shape]
    name = g.no_grad_input(g.new_input(dims, dtype or ("int64" if kind == "class" else "float32"), "contig", kind))
    if high is not None:
        g.inputs[-1]["high"] = high
        g.ns[name] = make_input(g.inputs[-1], g.sizes, g.seed * 1000 + len(g.inputs) - 1)
    return name


def fam_loss(g):
    torch = g.torch
    r = g.rng
    a = g.pick(lambda u: u.is_floating_point() and u.dim() >= 1 and u.dtype in (torch.float32, torch.float64))
    if a is None:
        return None
    t = g.t(a)
    dt = str(t.dtype).split(".")[1]
    red = r.choice(("'mean'", "'sum'", "'none'"))
    kind = r.randrange(16)
    if kind <= 2 and t.dim() >= 2:
        c = t.shape[1]
        if c == 0:
            return None
        tshape = t[:, 0]
        ign = r.choice((-100, 0, c - 1))
        w = g.no_grad_input(g.new_input([c], dt, "contig", "positive")) if r.random() < 0.4 else "None"
        ls = r.choice(("0.0", "0.0", "0.1"))
        if kind == 2:      # probabilities as the target
            tg = _target(g, t, "normal", dtype=dt)
            return f"F.cross_entropy({a}, {tg}.softmax(1), weight={w}, label_smoothing={ls}, reduction={red})"
        tg = _target(g, tshape, "class", high=c)
        if kind == 1:
            return f"F.nll_loss(F.log_softmax({a}, 1), {tg}, weight={w}, ignore_index={ign}, reduction={red})"
        return (f"F.cross_entropy({a}, {tg}, weight={w}, ignore_index={ign}, label_smoothing={ls}, "
                f"reduction={red})")
    if kind == 3:
        tg = _target(g, t, "binary", dtype=dt)
        pw = g.new_input([g.sym(t.shape[-1])], dt, "contig", "positive") if r.random() < 0.4 else "None"
        return f"F.binary_cross_entropy_with_logits({a}, {tg}, pos_weight={pw}, reduction={red})"
    if kind == 4:
        tg = _target(g, t, "binary", dtype=dt)
        return f"F.binary_cross_entropy(torch.sigmoid({a}), {tg}, reduction={red})"
    if kind in (5, 6, 7):
        tg = _target(g, t, "normal", dtype=dt)
        return r.choice((f"F.smooth_l1_loss({a}, {tg}, reduction={red}, beta={r.choice(('1.0', '0.5', '0.0'))})",
                         f"F.huber_loss({a}, {tg}, reduction={red}, delta={r.choice(('1.0', '0.3', '2.0'))})",
                         f"F.mse_loss({a}, {tg}, reduction={red})", f"F.l1_loss({a}, {tg}, reduction={red})",
                         f"F.poisson_nll_loss({a}, {tg}.abs(), reduction={red})",
                         f"F.gaussian_nll_loss({a}, {tg}, {tg}.abs() + 0.1, reduction={red})",
                         f"F.soft_margin_loss({a}, {tg}.sign(), reduction={red})",
                         f"F.hinge_embedding_loss({a}, {tg}.sign(), margin={r.choice(('1.0', '0.5'))}, reduction={red})",
                         f"F.margin_ranking_loss({a}, {tg}, torch.ones_like({tg}).masked_fill({tg} > 0, -1), reduction={red})"))
    if kind == 8:
        tg = _target(g, t, "normal", dtype=dt)
        lt = r.random() < 0.5
        tgt = f"F.log_softmax({tg}, -1)" if lt else f"{tg}.softmax(-1)"
        red2 = r.choice(("'batchmean'", "'sum'", "'none'", "'mean'"))
        return f"F.kl_div(F.log_softmax({a}, -1), {tgt}, reduction={red2}, log_target={lt})"
    if kind in (9, 10) and t.dim() == 2 and t.shape[1]:
        c = t.shape[1]
        if kind == 9:
            tg = _target(g, t[:, 0], "class", high=c)
            return f"F.multi_margin_loss({a}, {tg}, p={r.choice((1, 2))}, margin={r.choice(('1.0', '0.5'))}, reduction={red})"
        tg = _target(g, t, "binary", dtype=dt)
        return r.choice((f"F.multilabel_soft_margin_loss({a}, {tg}, reduction={red})",
                         f"F.multilabel_margin_loss({a}, torch.where({tg} > 0, torch.arange({c}), -1), reduction={red})"))
    if kind == 11 and t.dim() == 2:
        b = _target(g, t, "normal", dtype=dt)
        y = _target(g, t[:, 0], "sign", dtype=dt)
        return r.choice((f"F.cosine_embedding_loss({a}, {b}, {y}, margin={r.choice(('0.0', '0.3'))}, reduction={red})",
                         f"F.triplet_margin_loss({a}, {b}, {b}.flip(0), margin=1.0, p={r.choice((1, 2))}, swap={r.random() < 0.3}, reduction={red})"))
    if kind == 12:
        tlen, n, c = r.randint(4, 10), r.randint(1, 3), r.randint(2, 5)
        s = r.randint(1, max(1, tlen // 2))
        lp = g.new_input([tlen, n, c], dt, "contig", "normal")
        tg = g.new_input([n, s], "int64", "contig", "class")
        g.inputs[-1]["high"] = c
        g.inputs[-1]["low"] = 1
        g.ns[tg] = make_input(g.inputs[-1], g.sizes, g.seed * 1000 + len(g.inputs) - 1)
        lens = f"torch.full(({n},), {tlen}), torch.full(({n},), {s})" if r.random() < 0.5 else \
            f"torch.tensor({[max(1, tlen - i) for i in range(n)]}), torch.tensor({[max(1, s - i % 2) for i in range(n)]})"
        return (f"F.ctc_loss(F.log_softmax({lp}, 2), {tg}, {lens}, blank=0, reduction={red}, "
                f"zero_infinity={r.random() < 0.5})")
    return None


def fam_intops(g):
    """Integer / bool arithmetic, bitwise ops, shifts, division and remainder with negatives."""
    torch = g.torch
    r = g.rng
    a = g.pick(lambda u: not u.is_floating_point(), recent=0.5)
    if a is None or r.random() < 0.15:
        a = g.new_input(None, r.choice(INT_DTYPES))
    t = g.t(a)
    b = g.pick(lambda u: not u.is_floating_point() and u is not t and _bcast(torch, u, t), recent=0.4)
    if b is None or r.random() < 0.3:
        b = r.choice(("3", "-3", "0", "1", "-1", "7", "127", "-128", "255", "True", "2", "100000"))
    ops = ("{a} + {b}", "{a} - {b}", "{a} * {b}", "torch.floor_divide({a}, {b})", "torch.remainder({a}, {b})",
           "torch.fmod({a}, {b})", "torch.div({a}, {b}, rounding_mode='trunc')",
           "torch.div({a}, {b}, rounding_mode='floor')", "{a} // {b}", "{a} % {b}", "{a} / {b}",
           "{a} & {b}", "{a} | {b}", "{a} ^ {b}", "{a} << {b}", "{a} >> {b}", "torch.bitwise_left_shift({a}, {b})",
           "torch.bitwise_right_shift({a}, {b})", "{a} == {b}", "{a} < {b}", "{a} >= {b}", "{a} != {b}",
           "torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "torch.pow({a}, {b})", "torch.gcd({a}, {b})",
           "torch.lcm({a}, {b})", "torch.logical_xor({a}, {b})", "torch.eq({a}, {b}).sum()",
           "torch.clamp({a}, min={b})", "torch.where({a} > 0, {a}, {b})", "torch.add({a}, {b}, alpha=3)",
           "torch.sub({a}, {b}, alpha=-2)", "torch.mul({a}, {b}).sum(0)" if t.dim() else "torch.mul({a}, {b})")
    unary = ("torch.bitwise_not({a})", "torch.abs({a})", "-{a}", "torch.sign({a})", "{a}.sum()", "{a}.sum(-1)" if t.dim() else "{a}.sum()",
             "{a}.prod()", "torch.cumsum({a}, 0)" if t.dim() else "{a}.cumsum(0)", "{a}.amax()" if t.numel() else "{a}.sum()",
             "{a}.square()", "torch.clamp({a}, -5, 5)", "{a}.sum(dtype=torch.int8)", "{a}.sum(dtype=torch.int16)",
             "torch.logical_not({a})", "{a}.bool().sum()", "{a}.max()" if t.numel() else "{a}.sum()",
             "{a}.argmax()" if t.numel() else "{a}.sum()", "({a} * {a}).to(torch.int8)", "{a}.mean(dtype=torch.float32)" if True else "")
    if r.random() < 0.3:
        return r.choice(unary).format(a=a)
    e = r.choice(ops)
    if r.random() < 0.2 and not b[0].isdigit() and b[0] != "-" and b != "True":
        a, b = b, a
    return e.format(a=a, b=b)


def _bcast(torch, u, t):
    try:
        torch.broadcast_shapes(u.shape, t.shape)
        return True
    except RuntimeError:
        return False


def fam_cast(g):
    """A cast between dtypes (every pair; a float cast to an integer type clamped into its range
    first: out-of-range float -> int is undefined behaviour in eager), or a bit view."""
    torch = g.torch
    r = g.rng
    a = g.pick()
    if a is None:
        return None
    t = g.t(a)
    dst = r.choice(ALL_DTYPES)
    src = str(t.dtype).split(".")[1]
    if t.is_floating_point() and dst in INT_DTYPES and dst != "bool":
        lo, hi = INT_RANGE[dst]
        if dst in ("int32", "int64"):       # exactly representable bounds in every float dtype
            lo, hi = (-2**24, 2**24) if src in ("float32", "float64") else (-60000, 60000)
            if src == "bfloat16":
                lo, hi = -2**24, 2**24
        return r.choice((f"torch.nan_to_num({a}, 0.0).clamp({lo}, {hi}).to(torch.{dst})",
                         f"{a}.nan_to_num(0.0).clamp({lo}, {hi}).round().to(torch.{dst})",
                         f"({a}.nan_to_num(0.0).clamp({lo}, {hi}) * 0.5).to(torch.{dst})"))
    if r.random() < 0.15 and t.dtype != torch.bool and t.dim() >= 1:
        same = [d for d in ALL_DTYPES if d != "bool" and getattr(torch, d).itemsize == t.dtype.itemsize]
        return f"{a}.view(torch.{r.choice(same)})"
    return r.choice((f"{a}.to(torch.{dst})", f"{a}.to(torch.{dst}).to(torch.{r.choice(ALL_DTYPES)})",
                     f"{a}.type(torch.{dst})", f"({a}.to(torch.{dst}) + 1)" if dst != "bool" else f"{a}.bool() | True"))


def fam_tensorop(g):
    torch = g.torch
    r = g.rng
    a = g.pick(lambda u: u.dim() >= 1)
    if a is None:
        return None
    t = g.t(a)
    d = g.dim(t)
    size = t.shape[d]
    k = r.randint(1, max(1, min(3, size)))
    fl = t.is_floating_point()
    fa = a if fl else f"{a}.float()"
    opts = [f"torch.sort({a}, {d}, stable=True)[{r.randint(0, 1)}]", f"torch.argsort({a}, {d}, stable=True, descending=True)",
            f"torch.topk({a}, {k}, {d}, largest={r.random() < 0.5})[{r.randint(0, 1)}]",
            f"torch.kthvalue({a}, {k}, {d})[0]", f"torch.median({a}, {d})[{r.randint(0, 1)}]",
            f"torch.median({a})", f"torch.nanmedian({a}, {d})[0]", f"torch.mode({a}, {d})[0]",
            f"torch.unique({a}, sorted=True)", f"torch.unique({a}, return_counts=True)[1]",
            f"torch.unique_consecutive({a})",
            f"torch.searchsorted(torch.sort({a}.flatten())[0], {a}, right={r.random() < 0.5})",
            f"torch.bucketize({a}, torch.tensor([-1.0, 0.0, 0.5, 2.0]), right={r.random() < 0.5})",
            f"torch.histc({fa}, bins={r.randint(1, 6)}, min=-2, max=2)",
            f"torch.bincount({a}.flatten().long().abs() % 7)" if not fl else f"torch.bincount(({a}.flatten().nan_to_num(0).abs() % 7).long())",
            f"torch.flip({a}, [{d}])", f"torch.roll({a}, {r.randint(-3, 3)}, {d})", f"torch.roll({a}, {r.randint(-5, 5)})",
            f"torch.repeat_interleave({a}, {r.randint(1, 3)}, {d})",
            f"torch.repeat_interleave({a}, torch.arange({size}) % 3, dim={d})",
            f"torch.take_along_dim({a}, torch.argsort({a}, {d}, stable=True), {d})",
            f"{a}.narrow({d}, {r.randint(0, max(size - 1, 0))}, {r.randint(0, 1) if size else 0})",
            f"{a}.unfold({d}, {r.randint(1, 2)}, {r.randint(1, 2)})", f"torch.movedim({a}, 0, -1)",
            f"torch.diag_embed({a}, {r.randint(-1, 1)})",
            f"torch.where({a} > 0, {a}, {a}.flatten()[:1])" if t.numel() else f"{a}.clone()",
            f"{a}.masked_fill({a}[..., :1] > 0, {g.scalar()})",
            f"torch.clamp({fa}, {fa}.mean(-1, keepdim=True), {fa}.amax(-1, keepdim=True))" if t.numel() else f"{a} + 1",
            f"torch.clamp({fa}, min={fa}.flip(-1))", f"torch.lerp({fa}, {fa}.flip(-1), {fa}.sigmoid())",
            f"torch.addcmul({fa}, {fa}, {fa}.flip(-1), value=-0.5)", f"torch.addcdiv({fa}, {fa}, {fa}.abs() + 1, value=2)",
            f"torch.logsumexp({fa}.masked_fill({fa} > 0, -inf), {d})", f"torch.softmax({fa}.masked_fill({fa} > 0, -inf), {d})",
            f"F.log_softmax({fa}.masked_fill({fa} > 0, -inf), {d})",
            f"torch.nan_to_num({fa}, nan={g.scalar()}, posinf=7.0)", f"torch.nan_to_num({fa})"]
    if t.dim() >= 2:
        opts += [f"torch.tril({a}, {r.randint(-1, 1)})", f"torch.triu({a}, {r.randint(-1, 1)})",
                 f"torch.rot90({a}, {r.randint(-2, 3)}, [0, 1])", f"torch.diagonal({a}, {r.randint(-1, 1)})",
                 f"torch.movedim({a}, [0, 1], [1, 0])"]
    if t.dim() == 1:
        opts += [f"torch.diag({a}, {r.randint(-1, 1)})"]
    if t.dim() == 2:
        opts += [f"torch.diag({a})"]
    if size:
        idx = int_index(g, size, r.randint(1, 3))
        src = f"{a}.index_select({d}, {idx})"
        opts += [f"{a}.index_add({d}, {idx}, {src}, alpha=2)" if t.dtype != torch.bool else f"{a}.index_fill({d}, {idx}, True)",
                 f"{a}.index_copy({d}, {idx}, {src} * 2)" if t.dtype != torch.bool else f"{a}.index_copy({d}, {idx}, {src})",
                 f"{a}.index_fill({d}, {idx}, {g.scalar()})",
                 f"{a}.masked_scatter({a} > 0, {a}.flatten().flip(0))" if t.dtype != torch.bool else f"{a}.masked_scatter({a}, ~{a})"]
    return r.choice(opts)


def fam_linalg(g):
    torch = g.torch
    r = g.rng
    a = g.pick(lambda u: u.dtype in (torch.float32, torch.float64) and u.dim() >= 1)
    if a is None:
        a = g.new_input([g.sym(), g.sym()], r.choice(("float32", "float64")), None, "normal")
    t = g.t(a)
    ords = ("2", "1", "float('inf')", "-float('inf')", "0", "3", "0.5")
    opts = [f"torch.linalg.vector_norm({a}, {r.choice(ords)})", f"torch.linalg.vector_norm({a}, 2, -1, keepdim=True)",
            f"torch.linalg.norm({a})", f"torch.norm({a}, p={r.choice(('2', '1', 'fro'))})"]
    if t.dim() >= 2:
        opts += [f"torch.linalg.matrix_norm({a}, {r.choice(('fro', 1, -1, float('inf'), 'nuc', 2))!r})",
                 f"torch.linalg.norm({a}, dim=(-2, -1))"]
        n = t.shape[-1]
        if n:
            # well-conditioned square systems from the tensor: A = X X^T + n I (SPD)
            spd = f"({a}.mT @ {a} + {n} * torch.eye({n}, dtype={a}.dtype))"
            opts += [f"torch.linalg.solve({spd}, {a}.mT)", f"torch.linalg.inv({spd})", f"torch.linalg.det({spd} / {n})",
                     f"torch.linalg.cholesky({spd})", f"torch.linalg.qr({a})[{r.randint(0, 1)}]",
                     f"torch.linalg.slogdet({spd})[1]", f"torch.cholesky_solve({a}.mT, torch.linalg.cholesky({spd}))",
                     f"torch.linalg.eigvalsh({spd})", f"torch.linalg.solve_triangular(torch.linalg.cholesky({spd}), {a}.mT, upper=False)"]
    return r.choice(opts)


# ----- generator v3 families (--families userops): ops users write that v1 / v2 draw rarely or
# never; no earlier group draws them, so every earlier seed's program is unchanged

def _float_operand(g, min_rank=1, max_rank=4, dtypes=("float32", "float64")):
    """A float32 / float64 tensor of the program (or a new input) of rank min_rank..max_rank."""
    torch = g.torch
    r = g.rng
    a = g.pick(lambda u: u.dtype in tuple(getattr(torch, d) for d in dtypes) and min_rank <= u.dim() <= max_rank)
    if a is None or r.random() < 0.25:
        rank = r.randint(min_rank, max_rank)
        a = g.new_input([g.sym() for _ in range(rank)], r.choice(dtypes), None, r.choice(FILLS))
    return a


def fam_attention(g):
    """F.scaled_dot_product_attention: bool / additive (-inf) masks broadcast over batch and
    heads (rows fully masked included), is_causal with L != S, scale, enable_gqa; and the
    hand-written form (q @ k^T * scale).masked_fill(mask, -inf).softmax(-1) @ v."""
    r = g.rng
    dt = r.choice(("float32", "float32", "float64", "bfloat16"))
    fill = r.choice(("normal", "normal", "extreme", "ties"))
    batch = [g.sym(r.choice((1, 2, 3))) for _ in range(r.choice((0, 1, 2)))]
    L, S, E = g.sym(), g.sym(), g.sym(r.choice((1, 2, 4, 8)))
    Ev = E if r.random() < 0.5 else g.sym()
    gqa = len(batch) == 2 and r.random() < 0.2
    # enable_gqa: q has twice the key's heads
    q = g.new_input(([batch[0], g.sym(2 * g.sizes[batch[1]])] if gqa else batch) + [L, E], dt, None, fill)
    k = g.new_input(batch + [S, E], dt, None, fill)
    v = g.new_input(batch + [S, Ev], dt, None, r.choice(FILLS))
    mask_kind = r.choice(("none", "bool", "bool", "float", "causal", "tril"))
    mshape = [batch[0]] + [1] * (len(batch) - 1) if batch and r.random() < 0.3 else []
    mask = ""
    if mask_kind in ("bool", "float"):
        m = g.no_grad_input(g.new_input(mshape + [L, S], "bool", "contig", "normal"))
        mask = f", attn_mask={m}" if mask_kind == "bool" else \
            f", attn_mask=torch.zeros_like({m}, dtype={q}.dtype).masked_fill({m}, -inf)"
    elif mask_kind == "tril":
        mask = f", attn_mask=torch.ones({q}.shape[-2], {k}.shape[-2], dtype=torch.bool).tril(diagonal={r.randint(-1, 1)})"
    elif mask_kind == "causal":
        mask = ", is_causal=True"
    scale = r.choice(("", "", ", scale=0.5", ", scale=2.0"))
    extra = ", enable_gqa=True" if gqa else ""
    if r.random() < 0.25 and mask_kind in ("none", "bool", "tril"):
        sc = {"": f"{q}.shape[-1] ** -0.5", ", scale=0.5": "0.5", ", scale=2.0": "2.0"}[scale]
        s = f"({q} @ {k}.transpose(-2, -1)) * {sc}"
        if mask_kind != "none":
            mexpr = mask.split("=", 1)[1]
            s = f"({s}).masked_fill(~({mexpr}), -inf)"
        return f"torch.softmax({s}, -1) @ {v}"
    return f"F.scaled_dot_product_attention({q}, {k}, {v}{mask}{scale}{extra})"


def fam_fft(g):
    """torch.fft on float32 / float64: real-valued results of complex transforms (abs, real,
    imag, view_as_real), round trips (irfft of rfft with n, ifft), norms, fftshift, fftfreq."""
    r = g.rng
    a = _float_operand(g, 1, 3)
    t = g.t(a)
    d = g.dim(t)
    n = t.shape[d]
    norm = r.choice(("", "", ", norm='ortho'", ", norm='forward'", ", norm='backward'"))
    return r.choice((f"torch.fft.rfft({a}, dim={d}{norm}).abs()", f"torch.fft.fft({a}, dim={d}{norm}).real",
                     f"torch.fft.fft({a}, dim={d}{norm}).imag", f"torch.view_as_real(torch.fft.rfft({a}, dim={d}{norm}))",
                     f"torch.fft.irfft(torch.fft.rfft({a}, dim={d}{norm}), n={a}.shape[{d}], dim={d}{norm})",
                     f"torch.fft.ifft(torch.fft.fft({a}, dim={d}), dim={d}).real",
                     f"torch.fft.rfft({a}, n={r.randint(1, 9)}, dim={d}).abs()",
                     f"torch.fft.fftn({a}{norm}).abs()", f"torch.fft.rfft2({a}).real" if t.dim() >= 2 else f"torch.fft.rfft({a}).real",
                     f"torch.fft.fftshift({a}, dim={d})", f"torch.fft.ifftshift({a})",
                     f"torch.fft.hfft(torch.fft.ifft({a}, dim={d}), n={max(n, 1)}, dim={d})" if n else f"{a} * 2",
                     f"{a} * torch.fft.rfftfreq({a}.shape[-1] * 2 - 1)[:{a}.shape[-1]]",
                     f"torch.fft.irfft(torch.fft.rfft({a}) * torch.fft.rfft({a}.flip(-1)), n={a}.shape[-1])"))


def fam_einsum(g):
    """torch.einsum on equations of the operands' ranks: transposes, diagonals, traces, outer
    products, contractions, batch and ellipsis broadcasting, a repeated operand."""
    r = g.rng
    a = g.pick(lambda u: u.is_floating_point() and 1 <= u.dim() <= 3)
    if a is None:
        a = g.new_input([g.sym() for _ in range(r.randint(1, 3))], r.choice(("float32", "float64", "bfloat16")))
    t = g.t(a)
    dt = str(t.dtype).split(".")[1]
    syms = [g.sym(s) for s in t.shape]
    rank = t.dim()
    letters = "ijk"[:rank]
    kind = r.randrange(8)
    if kind == 0:
        return f"torch.einsum('{letters}->{letters[::-1]}', {a})"
    if kind == 1:
        return f"torch.einsum('{letters}->', {a})" if r.random() < 0.5 else f"torch.einsum('{letters}->{letters[-1]}', {a})"
    if kind == 2 and rank >= 2 and t.shape[-1] == t.shape[-2]:
        return r.choice((f"torch.einsum('...ii->...i', {a})", f"torch.einsum('...ii->...', {a})"))
    if kind == 3:
        b = g.new_input([g.sym()], dt)
        return f"torch.einsum('{letters},z->{letters}z', {a}, {b})"
    if kind == 4:
        b = g.new_input([syms[-1], g.sym()], dt)
        return f"torch.einsum('...{letters[-1]},{letters[-1]}z->...z', {a}, {b})"
    if kind == 5 and rank >= 2:
        b = g.new_input(syms[:-1] + [g.sym()], dt)
        return f"torch.einsum('{letters},{letters[:-1]}z->{letters[-1]}z', {a}, {b})"
    if kind == 6:
        return f"torch.einsum('{letters},{letters}->{letters[0]}', {a}, {a})"
    if rank == 3:
        b = g.new_input([syms[0], syms[2], g.sym()], dt)
        return f"torch.einsum('bij,bjk->bik', {a}, {b})"
    return f"torch.einsum('...{letters[-1]},...{letters[-1]}->...', {a}, {a}.flip(-1))"


def fam_distrib(g):
    """torch.distributions: log_prob / cdf / entropy / rsample (under the call's seed) / kl of
    Normal, Laplace, Cauchy, Uniform, Bernoulli, Categorical, Gamma, Beta, Poisson, Exponential,
    Independent and MultivariateNormal; values out of the support (validate_args raises in
    eager, so compiled must too) included."""
    r = g.rng
    D = "torch.distributions"
    a = _float_operand(g, 1, 3)
    t = g.t(a)
    fa = a if g.rng.random() < 0.5 else f"{a}.detach()"
    pos = f"(F.softplus({a}) + 0.1)"
    val = g.pick(lambda u: u.shape == t.shape and u.is_floating_point(), recent=0.3) or f"{a}.flip(-1)"
    kind = r.randrange(13)
    if kind == 0:
        return r.choice((f"{D}.Normal({fa}, {pos}).log_prob({val})", f"{D}.Normal({fa}, 2.0).cdf({val})",
                         f"{D}.Normal({a}, {pos}).entropy()", f"{D}.Normal({a}, {pos}).icdf(torch.sigmoid({val}))"))
    if kind == 1:
        return f"{D}.Normal({a}, {pos}).rsample()" if r.random() < 0.5 else f"{D}.Normal({a}, 1.0).rsample((2,))"
    if kind == 2:
        return r.choice((f"{D}.Laplace({a}, {pos}).log_prob({val})", f"{D}.Cauchy({a}, {pos}).log_prob({val})",
                         f"{D}.Laplace({a}, 0.5).cdf({val})", f"{D}.StudentT(3.0, {a}, {pos}).log_prob({val})"))
    if kind == 3:
        # in the support or not: eager raises ValueError on a value out of it
        return r.choice((f"{D}.Uniform({a} - 1, {a} + 1).log_prob({a} + torch.tanh({val}) * 0.5)",
                         f"{D}.Uniform(-1.0, 1.0).log_prob({val})",
                         f"{D}.Uniform(-1.0, 1.0, validate_args=False).log_prob({val})"))
    if kind == 4:
        return r.choice((f"{D}.Bernoulli(logits={a}).log_prob(({val} > 0).to({a}.dtype))",
                         f"{D}.Bernoulli(logits={a}).entropy()", f"{D}.Bernoulli(probs=torch.sigmoid({a})).log_prob(torch.ones_like({a}))"))
    if kind == 5 and t.shape[-1]:
        c = t.shape[-1]
        return r.choice((f"{D}.Categorical(logits={a}).log_prob(torch.arange({a}.shape[:-1].numel()).reshape({a}.shape[:-1]) % {c})",
                         f"{D}.Categorical(logits={a}).entropy()", f"{D}.Categorical(probs=torch.softmax({a}, -1)).probs",
                         f"{D}.OneHotCategorical(logits={a}).log_prob(F.one_hot(torch.zeros({a}.shape[:-1], dtype=torch.long), {c}).to({a}.dtype))"))
    if kind == 6:
        return r.choice((f"{D}.Gamma({pos}, 2.0).log_prob({pos}.flip(-1))", f"{D}.Gamma({pos}, {pos}).entropy()",
                         f"{D}.Beta({pos}, 1.5).log_prob(torch.sigmoid({val}))", f"{D}.Exponential({pos}).log_prob({val}.abs())",
                         f"{D}.Exponential({pos}).log_prob({val})"))
    if kind == 7:
        return f"{D}.Poisson({pos}).log_prob(({val}.detach().abs() * 3).floor())"
    if kind == 8:
        return f"{D}.Independent({D}.Normal({a}, {pos}), 1).log_prob({val})"
    if kind == 9:
        return f"{D}.kl_divergence({D}.Normal({a}, {pos}), {D}.Normal({val}, 1.5))"
    if kind == 10 and t.shape[-1]:
        n = t.shape[-1]
        return (f"{D}.MultivariateNormal({a}, scale_tril=torch.eye({n}, dtype={a}.dtype) * 2 + "
                f"torch.tril(torch.ones({n}, {n}, dtype={a}.dtype), -1) * 0.3).log_prob({val})")
    if kind == 11:
        return f"{D}.Normal(0.0, 1.0).log_prob({val}).sum(-1)"
    return f"{D}.LogNormal({a}, {pos}).log_prob({val}.abs() + 0.5)"


def fam_masked(g):
    """Masks users write: masked_fill with -inf then softmax / log_softmax (rows fully masked:
    NaN in eager), torch.where with scalar branches (both, either, of other dtypes), nan_to_num
    of the result, running means and reversed scans, cumsum / cumprod with a dtype."""
    torch = g.torch
    r = g.rng
    a = g.pick(lambda u: u.dim() >= 1)
    if a is None:
        a = _float_operand(g, 1, 3)
    t = g.t(a)
    d = g.dim(t)
    fa = a if t.is_floating_point() else f"{a}.float()"
    c = g.pick(lambda u: u.dtype == torch.bool and _bcast(torch, u, t), recent=0.3) or \
        r.choice((f"({a} > 0)", f"({a} != {a}.flip({d}))", f"({a} < 1)"))
    s1, s2 = r.choice((("0.0", "1.0"), ("1", "-1"), ("-inf", "0.0"), ("True", "False"), ("2", "0.5"),
                       ("float('nan')", "0"), ("-1", "3.5")))
    return r.choice((f"torch.softmax({fa}.masked_fill({c}, -inf), {d})", f"F.log_softmax({fa}.masked_fill(~{c}, float('-inf')), {d})",
                     f"torch.softmax({fa}.masked_fill({c}, -inf), {d}).nan_to_num(0.0)",
                     f"torch.softmax(torch.where({c}, {fa}, -inf), {d})", f"torch.where({c}, {s1}, {s2})",
                     f"torch.where({c}, {a}, {s1})", f"torch.where({c}, {s2}, {a})",
                     f"torch.where({c}, {fa}, torch.tensor({s1}))", f"{fa}.masked_fill(~{c}, 0.0).sum({d}) / {c}.sum({d}).clamp(min=1)",
                     f"torch.cumsum({a}, {d}, dtype=torch.{r.choice(('int32', 'int64', 'float32', 'float64'))})",
                     f"torch.cumprod({a}, {d}, dtype=torch.{r.choice(('int64', 'float64'))})",
                     f"torch.flip(torch.cumsum(torch.flip({a}, [{d}]), {d}), [{d}])",
                     f"torch.logcumsumexp({fa}.masked_fill({c}, -inf), {d})",
                     f"torch.cumsum({fa}, {d}) / torch.arange(1, {a}.shape[{d}] + 1).reshape([-1] + [1] * ({t.dim()} - 1 - {d % t.dim()}))",
                     f"torch.cummax({fa}.masked_fill({c}, nan), {d})[{r.randint(0, 1)}]",
                     f"{c}.cumsum({d})", f"torch.amax({fa}.masked_fill({c}, -inf), {d})"))


# ----- generator v3's "edges" group: the corners of the language users hit without meaning to

def _zero_dim(g, a):
    """A 0-dim tensor: a reduction or an element of `a`, or a literal of some dtype."""
    r = g.rng
    t = g.t(a)
    lit = r.choice(("2", "-3", "0", "0.5", "-1.5", "True", "255", "1e4"))
    dt = r.choice(ALL_DTYPES)
    opts = [f"torch.tensor({lit}, dtype=torch.{dt})", f"torch.tensor({lit})", f"{a}.sum()", f"{a}.amax()" if t.numel() else f"{a}.sum()",
            f"{a}.new_tensor({lit})", f"torch.scalar_tensor({lit})"]
    if t.dim() and t.numel():
        opts += [f"{a}[{', '.join(['0'] * t.dim())}]", f"{a}.flatten()[-1]"]
    return r.choice(opts)


def fam_edges(g):
    """Corners of type promotion and shapes that real programs reach: 0-dim tensors and Python
    scalars of other dtypes against tensors (0-dim tensors do not promote a tensor's category
    unless they are of a higher one: uint8 - torch.tensor(7) wraps, int + torch.tensor(2.5) is
    float), in-place ops whose result type must cast back into the operand (float += int,
    int += float raises), `out=` arguments (one of the wrong shape is resized), metadata in-place
    ops (t_, unsqueeze_, squeeze_, transpose_) on inputs and intermediates, writes through a
    stored view read back through its base, reductions over size-0 dims with keepdim and empty
    dim lists, matmul over an empty inner dim, and Python numbers taken from shapes and
    .item()."""
    torch = g.torch
    r = g.rng
    a = g.pick()
    if a is None or r.random() < 0.1:
        a = g.new_input(None, r.choice(ALL_DTYPES), None, r.choice(FILLS))
    t = g.t(a)
    n = t.dim()
    kind = r.randrange(8)
    if kind == 0:       # promotion against a 0-dim tensor or a Python scalar
        s = _zero_dim(g, a) if r.random() < 0.6 else r.choice(("2", "-1", "2.5", "True", "False", "-0.0", "300", "1e-3"))
        op = r.choice(("{a} + {b}", "{b} - {a}", "{a} * {b}", "{a} / {b}", "{b} // {a}", "{a} % {b}", "{a} ** {b}",
                       "torch.maximum({a}, torch.as_tensor({b}))", "torch.where({a} > 0, {a}, {b})",
                       "torch.where({a} > 0, {b}, {a})", "torch.clamp({a}, max={b})", "torch.add({a}, {b}, alpha=2)",
                       "{a} == {b}", "{a} & {b}", "torch.lerp({a}.float(), torch.as_tensor({b}).float(), 0.5)",
                       "torch.fmod({a}, {b})", "torch.copysign({a}, {b})", "{b} ** {a}"))
        return op.format(a=a, b=s)
    if kind == 1:       # in-place with promotion: the result is cast back into the operand
        other = g.pick(lambda u: u is not t and _bcast(torch, u, t), recent=0.3) or _zero_dim(g, a)
        base = a if r.random() < 0.5 or not g.input_names else r.choice(g.input_names)
        bt = g.t(base)
        view = base
        if bt.dim() >= 2 and r.random() < 0.5:
            view = r.choice((f"{base}.t()" if bt.dim() == 2 else f"{base}.transpose(0, 1)", f"{base}[:, ::2]",
                             f"{base}.diagonal()", f"{base}[1:].unsqueeze(0)", f"{base}.select(1, -1)"))
        op = r.choice(("add_", "sub_", "mul_", "div_", "floor_divide_", "remainder_", "pow_", "clamp_min_",
                       "maximum", "copy_", "lerp_", "bitwise_or_", "logical_and_", "masked_fill_"))
        if op == "maximum":
            return ("stmt", f"torch.maximum({view}, {other}, out={view})" if r.random() < 0.5 else
                    f"{view}.copy_(torch.maximum({view}, {other}))")
        if op == "lerp_":
            return ("stmt", f"{view}.lerp_({other}, 0.25)")
        if op == "masked_fill_":
            return ("stmt", f"{view}.masked_fill_({view} > {other}, {r.choice(('2', '-1.5', 'True', 'nan'))})")
        return ("stmt", f"{view}.{op}({other})")
    if kind == 2:       # out= arguments (another op's result, an input, a tensor of the wrong shape)
        dst = r.choice((f"torch.empty(0, dtype={a}.dtype)", f"torch.empty_like({a})",
                        f"torch.zeros({n + 1}, dtype={a}.dtype)", f"{a}.new_empty({a}.shape).t()" if n == 2 else
                        f"torch.empty_like({a})"))
        other = _zero_dim(g, a)
        op = r.choice(("torch.add({a}, {b}, out={o})", "torch.mul({a}, {b}, out={o})", "torch.neg({a}, out={o})",
                       "torch.abs({a}, out={o})", "torch.sum({a}, {d}, keepdim=True, out={o})" if n else "torch.sum({a}, out={o})",
                       "torch.clamp({a}, -1, 1, out={o})", "torch.where({a} > 0, {a}, {b}, out={o})",
                       "torch.cumsum({a}, {d}, out={o})" if n else "torch.neg({a}, out={o})",
                       "torch.amax({a}, {d}, out={o})" if n else "torch.abs({a}, out={o})"))
        return op.format(a=a, b=other, o=dst, d=g.dim(t) if n else 0)
    if kind == 3:       # metadata in-place ops on an input or an intermediate (the caller's input is changed)
        base = a if r.random() < 0.5 or not g.input_names else r.choice(g.input_names)
        bt = g.t(base)
        opts = [f"{base}.unsqueeze_({r.randint(-bt.dim() - 1, bt.dim())})", f"{base}.squeeze_()"]
        if bt.dim() >= 1:
            opts += [f"{base}.squeeze_({g.dim(bt)})", f"{base}.unsqueeze_(0).squeeze_(0).mul_(1)"]
        if bt.dim() == 2:
            opts += [f"{base}.t_()"]
        if bt.dim() >= 2:
            opts += [f"{base}.transpose_(0, -1)", f"{base}.swapdims_(0, 1)"]
        if bt.numel() >= 2:
            opts += [f"{base}.as_strided_(({bt.numel() // 2},), (2,))"]
        if bt.numel() >= 2 and bt.is_contiguous():
            # (shrinking: within the storage. An expanded tensor's storage is smaller than its
            # numel, and resize_ past it leaves new elements uninitialized: edges seed 361)
            opts += [f"{base}.resize_({bt.numel() - 1})"]
        return ("stmt", r.choice(opts))
    if kind == 4:       # writes through a stored view, the base read back
        if not n:
            return f"{a}.view(1).add_(1).view(())"
        d = g.dim(t)
        view = r.choice((f"{a}.narrow({d}, 0, 1)", f"{a}.unsqueeze(0)", f"{a}.view(-1)" if t.is_contiguous() else f"{a}[..., :1]",
                         f"{a}.movedim({d}, 0)", f"{a}[..., ::2]", f"{a}.flatten()" if t.is_contiguous() else f"{a}[:1]",
                         f"{a}.view({a}.shape)"))
        op = r.choice(("mul_(2)", "add_(1)", "zero_()", "fill_(3)", "neg_()", "clamp_(max=0)", "copy_(torch.ones(()))",
                       "bitwise_not_()" if not t.is_floating_point() else "sqrt_()"))
        return f"{view}.{op}.sum() + {a}.sum()" if r.random() < 0.3 else \
            ("stmt", f"{view}.{op}") if r.random() < 0.5 else f"{a}.clone().{op}"
    if kind == 5:       # reductions over size-0 dims (keepdim, empty dim lists)
        if not n:
            return r.choice((f"{a}.sum([])", f"{a}.mean([]) if {a}.is_floating_point() else {a}.sum([])", f"{a}.amax([])"))
        d = g.dim(t)
        e = r.choice((f"{a}.narrow({d}, 0, 0)", f"{a}[..., :0]", f"{a}[:0]"))
        kd = r.choice(("True", "False"))
        return r.choice((f"{e}.sum({d}, keepdim={kd})", f"{e}.prod({d}, keepdim={kd})", f"{e}.mean({d}, keepdim={kd})",
                         f"{e}.float().mean({d}, keepdim={kd})", f"{e}.any({d}, keepdim={kd})", f"{e}.all({d})",
                         f"torch.count_nonzero({e}, {d})", f"torch.logsumexp({e}.float(), {d}, keepdim={kd})",
                         f"{e}.float().var({d}, keepdim={kd})", f"{e}.float().std()", f"torch.linalg.vector_norm({e}.float(), 2, {d}, {kd})",
                         f"{e}.sum()", f"{e}.sum(dtype=torch.float64)", f"{a}.sum([], keepdim={kd})", f"{a}.amax([]) if {a}.numel() else {a}.sum([])",
                         f"torch.cumsum({e}, {d})", f"{e}.sum(-1, keepdim={kd}) + 1", f"torch.nansum({e}, {d})",
                         f"{e}.float() @ {e}.float().mT" if n >= 2 else f"{e}.float() @ {e}.float()",
                         f"torch.cat([{e}, {e}.flip({d})], {d}).sum({d}, keepdim={kd})",
                         f"{e}.amax({(d + 1) % n}, keepdim={kd})" if n >= 2 else f"{e}.amin(0) if {e}.numel() else {e}.sum(0)"))
    if kind == 6:       # Python numbers from shapes and .item()
        opts = [f"{a} * {a}.shape[-1]" if n else f"{a} * 2", f"{a} / {a}.numel() ** 0.5",
                f"{a}.float().sum() / max({a}.numel(), 1)", f"{a} * float({a}.float().abs().amax()) if {a}.numel() else {a}",
                f"{a} + int({a}.float().sum().clamp(-100, 100))", f"{a}.reshape({a}.numel() // max({a}.shape[0], 1), -1)" if n else f"{a}.reshape(1)",
                f"torch.full({tuple(t.shape)}, {a}.float().mean().item()) if {a}.numel() else {a}",
                f"{a} - {a}.float().sum().item() / 3", f"{a}.new_full((2,), len({a}))" if n else f"{a}.new_zeros(2)",
                f"{a} * (1 if bool({a}.float().sum() > 0) else -1)"]
        return r.choice(opts)
    # kind 7: 0-dim tensors mixed in: indexing by one, expanding one, one as a bound or a fill
    z = _zero_dim(g, a)
    opts = [f"{z}.expand({', '.join(str(s) for s in t.shape) or '()'})", f"torch.clamp({a}, min={z})",
            f"{a}.masked_fill({a} != {a}, {z}.item())" if t.is_floating_point() else f"{a}.masked_fill({a} > 0, {z}.item())",
            f"torch.stack([{z}, {z} * 2])", f"({z} + {a}).sum()", f"{z}.reshape(1, 1)",
            f"torch.full_like({a}, {z}.item())", f"{a}.new_full((3,), {z}.item())"]
    if n and t.shape[0]:
        opts += [f"{a}[torch.tensor({r.randint(-t.shape[0], t.shape[0] - 1)})]", f"{a}[{z}.long().clamp(0, {t.shape[0] - 1})]"]
    return r.choice(opts)


NEW_FAMILIES = {"module": (fam_module, 10), "loss": (fam_loss, 4), "intops": (fam_intops, 10),
                "cast": (fam_cast, 6), "tensorop": (fam_tensorop, 10), "linalg": (fam_linalg, 3),
                "attention": (fam_attention, 4), "fft": (fam_fft, 3), "einsum": (fam_einsum, 3),
                "distrib": (fam_distrib, 4), "masked": (fam_masked, 4), "edges": (fam_edges, 10)}
ALL_FAMILIES = {**FAMILIES, **NEW_FAMILIES}

# Family groups (generator v2): --families GROUP draws from these weights.
GROUPS = {
    "modules": {"module": 10, "loss": 4, "unary": 1, "binary": 1, "view": 1, "reduce": 1},
    "dtypes": {"intops": 10, "cast": 6, "binary": 2, "reduce": 1, "view": 1, "where": 1},
    "tensorops": {"tensorop": 10, "linalg": 3, "unary": 1, "binary": 1, "view": 1},
    "userops": {"attention": 4, "fft": 3, "einsum": 3, "distrib": 4, "masked": 4, "unary": 1, "binary": 1,
                "view": 1, "reduce": 1},
    "edges": {"edges": 10, "inplace": 2, "view": 2, "reduce": 2, "binary": 2, "intops": 1, "cast": 1, "index": 1},
}


def setup_statement(setup, seed, k):
    """A setup statement (building module m{k}) preceded by its own torch.manual_seed, so its
    parameters do not depend on the statements drawn before it."""
    return f"torch.manual_seed({seed * 100 + k}); {setup}"


def family_weights(families=None):
    """{family: weight} of a --families selection: None is generator v1 (FAMILIES, the programs
    of seeds before the v2 families existed); a group name (GROUPS) its weights; a family name
    its default weight."""
    if not families:
        return {f: w for f, (_, w) in FAMILIES.items()}
    out = {}
    for f in families:
        if f in GROUPS:
            out.update(GROUPS[f])
        elif f in ALL_FAMILIES:
            out[f] = ALL_FAMILIES[f][1]
        else:
            raise ValueError(f"unknown family or group {f!r}: {sorted(ALL_FAMILIES) + sorted(GROUPS)}")
    return out


def generate(seed: int, families=None, grad: bool = False) -> dict:
    """The program of a seed: {"seed", "source", "inputs", "sizes", "alt_sizes", "families", "tol",
    and for generator v2 / --grad: "setup", "grad", "v2"}."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # eager's warnings about the ops being tried
        return _generate(seed, families, grad)


def _first_inputs(g, families):
    r = g.rng
    if families and "modules" in families:
        rank = r.choice((3, 3, 4, 4, 5))
        spatial = [g.sym(r.choice((2, 3, 4, 5, 6, 8) if rank < 5 else (2, 3, 4))) for _ in range(rank - 2)]
        g.new_input([g.sym(r.choice((1, 2, 3))), r.randint(1, 6)] + spatial,
                    r.choice(("float32", "float32", "float32", "float64")), r.choice(("contig", "contig", "T", "channels_last")))
        return
    if families and "dtypes" in families:
        for _ in range(r.choice((1, 2, 2, 3))):
            g.new_input(None, r.choice(ALL_DTYPES), None, r.choice(FILLS + ("extreme",)))
        return
    if families and "edges" in families:      # mixed dtypes, 0-dim inputs, size-0 dims
        g.exact_saves = True
        for _ in range(r.choice((1, 2, 2, 3))):
            rank = r.choice((0, 1, 2, 2, 3))
            dims = [g.sym(0) if r.random() < 0.12 else g.sym() for _ in range(rank)]
            g.new_input(dims, r.choice(ALL_DTYPES + ("float32", "float32")), None, r.choice(FILLS + ("extreme",)))
        if not g.grad and r.random() < 0.3:       # the same tensor passed twice, or two views of it
            j = r.randrange(len(g.inputs))
            t = g.t(g.input_names[j])
            views = ["x", "x", "x.unsqueeze(0)"] + (["x[1:]", "x[..., 1:]", "x[..., ::2]"] if t.dim() else []) + \
                (["x[0]"] if t.dim() and t.shape[0] else []) + \
                (["x.mT", "x.diagonal()", "x[:, 1:].mT"] if t.dim() >= 2 else [])
            g.new_alias_input(j, r.choice(views))
        return
    if families and "userops" in families:
        for _ in range(r.choice((1, 1, 2))):
            g.new_input([g.sym() for _ in range(r.randint(1, 3))], r.choice(("float32", "float32", "float64", "bfloat16")))
        return
    for i in range(r.choice((1, 1, 2, 2, 3))):
        g.new_input(None, r.choice(("float32", "float32", "float64")) if g.grad and i == 0 else None)


def _generate(seed: int, families=None, grad: bool = False) -> dict:
    g = Gen(seed, grad)
    r = g.rng
    v2 = bool(grad or (families and any(f in NEW_FAMILIES or f in GROUPS for f in families)))
    if v2:
        _first_inputs(g, families)
    else:
        for _ in range(r.choice((1, 1, 2, 2, 3))):
            g.new_input()
    n_ops = r.randint(3, 12) if not (families and "modules" in families) else r.randint(2, 6)
    table = family_weights(families)
    fams = list(table)
    weights = [table[f] for f in fams]
    tries = 0
    while len(g.lines) < n_ops and tries < 200:
        tries += 1
        fam = r.choices(fams, weights)[0]
        try:
            text = ALL_FAMILIES[fam][0](g)
        except (RuntimeError, ValueError, IndexError, TypeError):
            text = None
        if text is None:
            continue
        if isinstance(text, tuple) and text[0] == "setup":
            g.try_line(text[2], fam, setup=text[1])
        elif isinstance(text, tuple):
            g.try_line(text[1], fam, new=False)
        else:
            g.try_line(text, fam)
    torch = g.torch
    made = [v for v in g.vars if v.startswith("v")]
    outs = made[-1:] if made else []
    for v in made[:-1]:
        if r.random() < 0.25:
            outs.append(v)
    if g.input_names and r.random() < 0.15:
        x = r.choice(g.input_names)
        outs.append(r.choice((x, f"{x}.t()" if g.t(x).dim() == 2 else x, f"{x}.view(-1)" if g.t(x).is_contiguous() else x,
                              f"{x}[1:]" if g.t(x).dim() else x)))
    if r.random() < 0.1:
        outs.append("torch.zeros(2)")
    if not outs:
        outs = [g.input_names[0]]
    lines = list(g.lines)
    if grad:
        # the outputs reduced to one float64 loss, each weighted by a fixed pattern of its
        # elements' positions (so every element's gradient differs)
        terms = [f"(({o}).double() * (torch.arange(({o}).numel()) % 7 - 3).double().reshape(({o}).shape)).sum()"
                 for o in outs if _requires_grad(g, o)]
        if not terms:
            terms = [f"{x}.double().sum() * 0" for x in g.input_names if _requires_grad(g, x)][:1] or ["torch.zeros((), dtype=torch.float64)"]
        lines.append("loss = " + " + ".join(terms))
        outs = ["loss"] + [f"{o}.detach()" if _requires_grad(g, o) else o for o in outs]
    params = ", ".join(g.input_names)
    body = "\n".join("    " + ln for ln in lines)
    ret = ", ".join(outs)
    src = f"def f({params}):\n{body}\n    return ({ret},)\n" if body else f"def f({params}):\n    return ({ret},)\n"
    del torch
    prog = {"seed": seed, "source": src, "inputs": g.inputs, "sizes": g.sizes, "alt_sizes": g.alt_sizes,
            "families": sorted(set(g.families)), "tol": max((TOL[d] for d in g.float_dtypes), default=0.0)}
    if v2:
        prog.update(setup=list(g.setup), grad=bool(grad), v2=True)
        if _eager_raises(prog, alt=True) and not _eager_raises(prog, alt=False):
            # the program does not run at the second shapes (a module's size bound to a dim):
            # the second set keeps the first sizes (other values)
            prog["alt_sizes"] = dict(prog["sizes"])
    return prog


def _requires_grad(g, expr):
    try:
        v = g.t(expr)
    except Exception:  # noqa: BLE001
        return False
    return isinstance(v, g.torch.Tensor) and v.requires_grad


def program_namespace(prog):
    """The namespace a program runs in: torch, F, its modules (built by the setup statements)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    ns = {"torch": torch, "F": F, "nan": float("nan"), "inf": float("inf")}
    if prog.get("v2"):
        exec(MODULE_PRELUDE, ns)  # noqa: S102
        for k, st in enumerate(prog.get("setup", ())):
            exec(setup_statement(st, prog["seed"], k), ns)  # noqa: S102
    exec(prog["source"], ns)  # noqa: S102 - the generated program
    return ns


def _eager_raises(prog, alt):
    import torch

    try:
        ns = program_namespace(prog)
        ins = make_inputs(prog, alt=alt)
        torch.manual_seed(CALL_SEED)
        with (torch.enable_grad() if prog.get("grad") else torch.no_grad()):
            out = ns["f"](*ins)
            if prog.get("grad"):
                out[0].backward()
    except Exception:  # noqa: BLE001
        return True
    return False


def repro(prog) -> str:
    """A standalone script that reproduces the program against eager."""
    return (f"# seed {prog['seed']} (families: {', '.join(prog['families'])}"
            f"{', --grad' if prog.get('grad') else ''})\n"
            "import torch, torch.nn.functional as F\nimport mlircap\n"
            "import sys; sys.path.insert(0, 'bench'); from fuzz_graphs import make_input\n"
            "nan, inf = float('nan'), float('inf')\n"
            + prog["source"]
            + f"specs = {json.dumps(prog['inputs'])}\n"
            + f"sizes, alt_sizes = {json.dumps(prog['sizes'])}, {json.dumps(prog['alt_sizes'])}\n"
            + f"inputs = [make_input(s, sizes, {prog['seed']} * 1000 + i) for i, s in enumerate(specs)]\n"
            + f"alt = [make_input(s, alt_sizes, {prog['seed']} * 1000 + i + 500) for i, s in enumerate(specs)]\n"
            + ("from fuzz_graphs import _aliased  # inputs that view another input\n"
               "inputs, alt = _aliased(specs, inputs), _aliased(specs, alt)\n"
               if any(s["layout"] == "alias" for s in prog["inputs"]) else "")
            + _repro_v2(prog))


def _repro_v2(prog) -> str:
    if not prog.get("v2"):
        return ""
    out = "# generator v2: the modules f reads\n" + MODULE_PRELUDE.strip() + "\n\n\n"
    out += "".join(f"{setup_statement(st, prog['seed'], k)}\n" for k, st in enumerate(prog.get("setup", ())))
    out += (f"# a third input set: make_input(s, sizes, {prog['seed']} * 1000 + i + 250)\n"
            + ("# --grad: floating inputs (not loss targets) require grad; out[0].backward(); compare .grad\n"
               if prog.get("grad") else ""))
    return out


# --------------------------------------------------------------------------- running one program

TOL = {"float64": 1e-7, "float32": 1e-4, "bfloat16": 3e-2, "float16": 4e-3}


def compare_values(actual, expected, path, tol=0.0):
    """Raises opinfo.Mismatch: values (tolerance of the dtype or `tol`, the larger, relative to
    the output's scale: a float64 result of bfloat16 steps gets bfloat16's), NaN pattern, dtype
    and shape; integers and bools exactly."""
    import torch

    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            raise opinfo.Mismatch(f"{path}: shape/dtype {tuple(actual.shape)} {actual.dtype} "
                                  f"!= eager {tuple(expected.shape)} {expected.dtype}")
        if expected.is_floating_point():
            a, e = actual.detach().double(), expected.detach().double()
            if not torch.equal(a.isnan(), e.isnan()):
                raise opinfo.Mismatch(f"{path}: NaN pattern differs ({int(a.isnan().sum())} NaN, eager "
                                      f"{int(e.isnan().sum())})")
            fin = e.isfinite()
            if not torch.equal(a[~fin & ~e.isnan()], e[~fin & ~e.isnan()]):
                raise opinfo.Mismatch(f"{path}: inf pattern differs")
            rtol = max(tol, TOL[str(expected.dtype).split(".")[1]])
            scale = max(1.0, float(e[fin].abs().max())) if fin.any() else 1.0
            diff = (a[fin] - e[fin]).abs()
            bad = diff > rtol * scale + rtol * e[fin].abs()
            if bool(bad.any()) or not bool(a[fin].isfinite().all()):
                raise opinfo.Mismatch(f"{path}: {int(bad.sum())} of {e.numel()} values differ, max abs diff "
                                      f"{float(diff.max()):.4g} (scale {scale:.4g})")
            return
        if not torch.equal(actual, expected):
            raise opinfo.Mismatch(f"{path}: {int((actual != expected).sum())} of {expected.numel()} values differ")
        return
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)) and len(actual) == len(expected):
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare_values(a, e, f"{path}[{i}]", tol)
        return
    opinfo.compare(actual, expected, path, None)


def _module_state(ns):
    """The program's modules (sorted by name) with their initial state."""
    import torch

    mods = [(k, v) for k, v in sorted(ns.items()) if isinstance(v, torch.nn.Module)]
    return [(m, {k: v.detach().clone() for k, v in m.state_dict().items()}) for _, m in mods]


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


# Random ops whose values the float64 reference replays from the program's own run (cast):
# pure draws (their values depend on no tensor's values) and draws of decisions from given
# probabilities (bernoulli, multinomial: the same decisions). Others (normal of a mean tensor,
# rrelu's noise, dropout's fused form) leave the program without a float64 reference.
REPLAYED_DRAWS = frozenset(("rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
                            "uniform_", "normal_", "bernoulli_", "bernoulli", "random_", "exponential_",
                            "cauchy_", "log_normal_", "geometric_", "multinomial"))


def _draws_mode():
    """A dispatch mode that records every random op's result (`.draws`) on a first run, and,
    with `.replay` set, overwrites the same op's result with the recorded one on a second run
    (float64: the recorded float32 draws cast). `.ok` turns False where a random op is not
    replayable or the second run's sequence of draws differs (op or shape)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Draws(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.draws, self.replay, self.i, self.ok = [], False, 0, True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if torch.Tag.nondeterministic_seeded not in func.tags or _draws_nothing(func, args, kwargs or {}):
                return out
            name = func.overloadpacket.__name__
            if name not in REPLAYED_DRAWS or not isinstance(out, torch.Tensor):
                self.ok = False
            elif not self.replay:
                self.draws.append((name, out.detach().clone()))
            elif self.i < len(self.draws) and self.draws[self.i][0] == name and self.draws[self.i][1].shape == out.shape:
                out.copy_(self.draws[self.i][1])
                self.i += 1
            else:
                self.ok = False
            return out

    return Draws()


def _draws_nothing(func, args, kwargs) -> bool:
    """Whether this call of a seeded op (Tag.nondeterministic_seeded) draws no number: an
    attention kernel with dropout_p 0 (aten._scaled_dot_product_flash_attention_for_cpu is tagged
    for its dropout; userops seed 2027 had no float64 reference for it)."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == "dropout_p":
            p = kwargs.get("dropout_p", args[i] if i < len(args) else a.default_value)
            return isinstance(p, (int, float)) and p == 0
    return False


def fp64_reference(prog, tensors, round_ties=False):
    """The program's outputs (as run_program's call returns them) computed in float64: floating
    inputs, the modules and the default dtype float64, the same seed. A program that draws
    random numbers runs first as it is, and the float64 run takes its draws (cast): float64
    draws other numbers (rand of float32 keeps 24 bits of another stream). None where it does
    not run so (a dtype-specific op), or draws numbers REPLAYED_DRAWS does not replay.
    `round_ties`: the float64 values TIE_OPS read are rounded to float32 first (_ties_rounded)."""
    import torch

    if any(s["layout"] == "alias" for s in prog["inputs"]):
        return None          # the float64 copies would not alias each other
    draws = None
    if "rng" in prog["families"] or "distrib" in prog["families"]:
        draws = _draws_mode()
        try:
            with draws:
                _run_for_reference(prog, program_namespace(prog), [t.detach().clone() for t in tensors], tensors)
        except Exception:  # noqa: BLE001
            return None
        draws.replay = True
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        for lift in (True, False):
            ns = program_namespace(prog)
            for v in list(ns.values()):
                if isinstance(v, torch.nn.Module):
                    v.double()
            with torch.no_grad():
                ins = [t.detach().double() if t.is_floating_point() else t.detach().clone() for t in tensors]
            if draws is not None:
                draws.i, draws.ok = 0, True
            try:
                with draws if draws is not None else contextlib.nullcontext(), \
                        _float32_lifted() if lift else contextlib.nullcontext(), \
                        _ties_rounded() if round_ties else contextlib.nullcontext():
                    res = _run_for_reference(prog, ns, ins, tensors)
                break
            except Exception:  # noqa: BLE001
                if not lift:
                    raise
        if draws is not None and not (draws.ok and draws.i == len(draws.draws)):
            return None
        return res
    except Exception:  # noqa: BLE001
        return None
    finally:
        torch.set_default_dtype(old)


def _float32_lifted():
    """A dispatch mode for the float64 reference run: a cast to float32 (`.float()`,
    `dtype=torch.float32` of softmax / sum / a factory) gives float64 instead. The reference
    stands for exact arithmetic; a float32 cast in it would make eager's float32 rounding of the
    steps after it part of the reference (--grad seed 1221: log_softmax(v.float()) values near 0
    then reciprocal, the float64 program's gradient equal to eager's float32 one to 7 digits,
    a compiled one of the same float32 error 'wrong'). Casts to float16 / bfloat16 stay (a
    deliberate quantization). A view of the bits as another dtype raises (its values depend on
    the float format), and the reference falls back to the unlifted run where this raises."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Lift(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.view.dtype:
                raise RuntimeError("a bit view in the lifted float64 reference")
            kwargs = dict(kwargs or {})
            if kwargs.get("dtype") is torch.float32:
                kwargs["dtype"] = torch.float64
            return func(*args, **kwargs)

    return Lift()


# ops whose result's size or values hinge on exact equality of floating values (values one
# rounding apart merged or not)
TIE_OPS = frozenset({"_unique2", "_unique", "unique_consecutive", "unique_dim", "unique_dim_consecutive"})


def _ties_rounded():
    """A dispatch mode for the float64 reference run: the float64 values TIE_OPS read rounded
    to float32 first, the program as float32 arithmetic rounded correctly computes it. The
    float64 program's values of near-equal float32 ones are all distinct (tensorops seed
    1990: 10 unique norms, eager's float32 ones 10, 1-2 ulp apart, the compiled ones 7, each
    the float64 value rounded), so its unique size is no reference for a float32 program."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Round(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in TIE_OPS and args and isinstance(args[0], torch.Tensor) \
                    and args[0].dtype == torch.float64:
                args = (args[0].float().double(), *args[1:])
            return func(*args, **(kwargs or {}))

    return Round()


def _run_for_reference(prog, ns, ins, tensors):
    import torch

    if prog.get("grad"):
        ins = [t.requires_grad_() if u.requires_grad else t for t, u in zip(ins, tensors)]
    mods = _module_state(ns)
    torch.manual_seed(CALL_SEED)
    if prog.get("grad"):
        out = ns["f"](*ins)
        out[0].backward()
        res = (out, [t.grad for t in ins if isinstance(t, torch.Tensor) and t.requires_grad],
               [p.grad for m, _ in mods for p in m.parameters()])
    else:
        with torch.no_grad():
            res = ns["f"](*ins)
    if mods:
        res = (res, [b.detach().clone() for m, _ in mods for b in m.buffers()])
    return res, [t.detach() for t in ins]


def _nonfinite_kind(t):
    """Per element: 0 finite, 1 NaN, 2 +inf, 3 -inf."""
    import torch

    return t.isnan().to(torch.int8) + 2 * (t == float("inf")).to(torch.int8) + 3 * (t == float("-inf")).to(torch.int8)


def within_fp64_error(actual, expected, ref, tol, multiplier=2.0, tie_ref=None):
    """Whether every floating leaf of `actual` that differs from eager's (`expected`) beyond the
    dtype's tolerance is at most `multiplier` times as far from the float64 result (`ref`, same
    structure) as eager's is, in root mean square over the finite elements, plus tol / 10 of
    the output's scale: the criterion torch's own compiler benchmarks use (torch._dynamo.utils.same
    with fp64_ref). An ill-conditioned step (sin of 1e4, a difference of nearly equal sums)
    amplifies a rounding difference of one ulp beyond any fixed tolerance; eager's own result
    is then as far from the exact one, and this measures how far."""
    import torch

    a_l, e_l, r_l = _leaves(actual), _leaves(expected), _leaves(ref)
    if not len(a_l) == len(e_l) == len(r_l):
        return False
    t_l = _leaves(tie_ref) if tie_ref is not None else [None] * len(a_l)
    if len(t_l) != len(a_l):
        return False
    for a, e, r, t in zip(a_l, e_l, r_l, t_l):
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and a.shape != e.shape:
            # the size of a unique of floating values: accepted where eager's differs from the
            # float64 program's with TIE_OPS reading float32 roundings (`tie_ref`, tensorops
            # seeds 1990 and 2076: norms 1-2 ulp apart in eager's float32, equal once rounded)
            # and the compiled output is that program's (sizes; values within tolerance)
            if not isinstance(t, torch.Tensor) or t.shape == e.shape or t.shape != a.shape or a.dtype != e.dtype:
                return False
            try:
                compare_values(a, t.to(a.dtype), "out", max(tol, TOL[str(a.dtype).split(".")[1]])
                               if a.is_floating_point() else tol)
            except opinfo.Mismatch:
                return False
            continue
        if not isinstance(e, torch.Tensor) or not e.is_floating_point():
            try:
                compare_values(a, e, "out", tol)
            except opinfo.Mismatch:
                # integers and bools (ranks, counts, comparisons of floats): accepted only
                # where eager's own differ from the float64 program's too (a comparison of
                # values one ulp apart), and in at most twice as many positions
                if not (isinstance(a, torch.Tensor) and isinstance(r, torch.Tensor) and a.shape == e.shape == r.shape
                        and a.dtype == e.dtype):
                    return False
                e_off = int((e != r.to(e.dtype)).sum())
                if not e_off or int((a != r.to(e.dtype)).sum()) > multiplier * e_off:
                    return False
            continue
        try:
            compare_values(a, e, "out", tol)
            continue
        except opinfo.Mismatch:
            pass
        if not isinstance(r, torch.Tensor) or r.shape != e.shape or not r.is_floating_point():
            return False
        if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype:
            return False
        rtol = max(tol, TOL[str(e.dtype).split(".")[1]])
        a, e, r = a.detach().double(), e.detach().double(), r.detach().double()
        # NaN / +inf / -inf where eager's differ: accepted only at elements where eager's own
        # differ from the float64 program's (a division by a cancellation that is rounding
        # noise: eager's tanh one ulp below 1 made gelu(-5.11) -0, 1 / it -inf, where the
        # float64 program's and the compiled one's are finite; --grad seed 1645), as for
        # integers above, and off the float64 program's in at most twice as many elements
        pa, pe, pr = _nonfinite_kind(a), _nonfinite_kind(e), _nonfinite_kind(r)
        differ = pa != pe
        if differ.any():
            e_off = pe != pr
            if not bool(e_off[differ].all()) or int((pa != pr).sum()) > multiplier * int(e_off.sum()):
                return False
        fin = e.isfinite() & r.isfinite() & ~differ
        if not fin.any():
            if differ.any():
                continue
            return False
        scale = max(1.0, float(e[fin].abs().max()))
        res_err = float((a[fin] - r[fin]).pow(2).mean().sqrt())
        ref_err = float((e[fin] - r[fin]).pow(2).mean().sqrt())
        if not res_err <= multiplier * ref_err + rtol / 10 * scale:
            return False
    return True


def _scalar_logit_backward(grad, x, eps=None):
    """eager's scalar loop of logit's gradient (CUDA's kernel too): a NaN x gives NaN."""
    import torch

    if eps is None or eps < 0:
        return torch.where((x < 0) | (x > 1), float("nan"), grad / (x * (1 - x)))
    return torch.where((x < eps) | (x > 1 - eps), 0.0, grad / (x * (1 - x)))


def _scalar_loop(name):
    """aten op `name` as eager's scalar loop computes it: on strided copies of its tensor
    arguments (TensorIterator takes the vectorized body only for contiguous operands), the
    result laid out as the first one."""

    def strided(t):
        import torch

        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        buf = t.new_empty((*t.shape, 2))[..., 0]
        return buf.copy_(t)

    def rule(*args, **kwargs):
        import torch

        out = getattr(torch.ops.aten, name).default(*[strided(a) for a in args], **kwargs)
        return torch.empty_like(args[0]).copy_(out)

    return rule


def _row_by_row(name):
    """aten mm / addmm / bmm `name` of bfloat16 / float16 operands as eager computes each row
    of the result alone (a product of one row: M = 1); other dtypes as they are."""

    def rule(*args, **kwargs):
        import torch

        op = getattr(torch.ops.aten, name).default
        a = args[1] if name == "addmm" else args[0]
        if a.dtype not in (torch.bfloat16, torch.float16) or a.shape[-2] <= 1:
            return op(*args, **kwargs)
        rows = []
        for i in range(a.shape[-2]):
            if name == "addmm":
                bias = args[0]
                if bias.dim() == 2 and bias.shape[0] != 1:
                    bias = bias[i:i + 1]
                rows.append(op(bias, a[i:i + 1], *args[2:], **kwargs))
            else:
                rows.append(op(a[..., i:i + 1, :], *args[1:], **kwargs))
        return torch.cat(rows, -2)

    return rule


def _flash_attention_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    """aten._scaled_dot_product_flash_attention_for_cpu: eager's own result, but NaN (output row
    and logsumexp) in a row whose scores are all NaN or -inf, one NaN at least, as eager's vector
    loop gives it (its vector maximum is NaN, where its scalar remainder's std::max skips NaN and
    leaves -inf: a row masked out entirely, 0). Scores as the kernel's: q @ k^T (float32 for
    bfloat16 / float16; k's heads repeated for GQA) times the scale, -inf above the diagonal
    when causal, plus the mask."""
    import torch

    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    if dropout_p != 0.0:
        return out, lse
    heads = query.size(1)
    k = key if key.size(1) == heads else key.repeat_interleave(heads // key.size(1), 1)
    acc = torch.float32 if query.dtype in (torch.bfloat16, torch.float16) else query.dtype   # the kernel's
    s = (query.to(acc) @ k.to(acc).transpose(-2, -1)) * (scale if scale is not None else query.size(-1) ** -0.5)
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        s = s + attn_mask.to(acc)     # additive (F.scaled_dot_product_attention converts a bool mask)
    nan_rows = s.isnan().any(-1) & (s.isnan() | (s == float("-inf"))).all(-1)
    return out.masked_fill_(nan_rows[..., None], float("nan")), lse.masked_fill_(nan_rows, float("nan"))


# eager CPU kernels whose result at an element depends on its position in the kernel's loop:
# the vectorized body and the scalar remainder (or a strided input, scalar throughout) differ.
# logit_backward with eps: its vector body gives 0 for a NaN x, its scalar loop NaN (float32,
# AVX512: elements 32..59 of 60 NaN, 96..99 of 100, all of 16 or fewer, all of a strided
# input; --grad seed 1435). gelu (erf form) of +inf: NaN in the vector body (float32 / bfloat16
# / float16, every contiguous tensor of 2 or more elements), +inf in the scalar loop (one
# element, a strided input) as in its float64 kernel (vectorized too) and the limit
# (--grad seed 1667: gelu of an adaptive_max_pool1d of logs of an overflowed float16 einsum).
# A bfloat16 product (oneDNN) of many rows: a row of -inf times positive weights gives NaN in
# about half its elements where the same row alone (M = 1) and float32 give -inf (K = 7, M = 96:
# 576 NaN of 1152; --grad seed 1534, F.linear of a masked_fill(-inf)); each row alone is the rule.
# hardswish_backward of a NaN x: NaN in the float64 vector body, the gradient itself in the
# scalar loop (its `x <= 3` else-branch) and in every float32 / bfloat16 element (--grad seed
# 2241: 16 of a float64 row of 20, hardswish of a matmul of atan of a NaN input).
# CPU flash attention: its row max is a vector maximum (NaN-propagating) over the keys that
# fill its vector loop and std::max (NaN skipped) over the remainder, so a row of NaN scores (a
# NaN query row) with fewer keys than one vector (16 float32 on AVX512) has max -inf, read as a
# row masked out entirely: 0, where 16 keys or more, a transposed key (the same call) and its
# math backend give NaN (userops seed 750: 120 NaN elements eager, 208 compiled). Here the
# rule is the vector loop's, which holds at every position.
# Their consistent rule (a scalar loop, a row alone, a full vector loop) is the reference where
# eager's own result is not.
POSITION_DEPENDENT_KERNELS = {"logit_backward": _scalar_logit_backward,
                              "gelu": _scalar_loop("gelu"),
                              "hardswish_backward": _scalar_loop("hardswish_backward"),
                              "_scaled_dot_product_flash_attention_for_cpu": _flash_attention_for_cpu,
                              **{name: _row_by_row(name) for name in ("mm", "addmm", "bmm")}}


def _eager_depends_on_position(call, fn, tensors, got, tol) -> bool:
    """Whether the compiled result `got` is eager's with POSITION_DEPENDENT_KERNELS run as
    their consistent rule (while eager's own result differs from it: the caller's mismatch)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Scalar(TorchDispatchMode):
        used = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            rule = POSITION_DEPENDENT_KERNELS.get(func.overloadpacket.__name__)
            if rule is None:
                return func(*args, **(kwargs or {}))
            Scalar.used = True
            with torch._C.DisableTorchFunctionSubclass():
                return rule(*args, **(kwargs or {}))

    with Scalar():
        out, ins, exc = call(fn, tensors)
    if exc is not None or not Scalar.used:
        return False
    try:
        compare_values(got[0], out, "out", tol)
        compare_values(got[1], ins, "input", tol)
    except opinfo.Mismatch:
        return False
    return True


# ops whose result jumps where an operand crosses a multiple of another or an integer, and the
# positions of the operands whose rounding decides the side (div with a rounding_mode too)
JUMP_OPS = {"fmod": (0, 1), "remainder": (0, 1), "floor_divide": (0, 1), "floor": (0,), "ceil": (0,),
            "trunc": (0,), "round": (0,), "frac": (0,)}
JUMP_EPS = (1, 2, 4, 8)


def _eager_near_jump(call, fn, tensors, got, want, tol) -> bool:
    """Whether every element of the compiled result `got` that differs from eager's (`want`: its
    outputs, inputs) is eager's own with one operand position of the JUMP_OPS ops moved by a few
    roundings (1 to 8 eps of its dtype, up or down): such an op turns a rounding of its operand
    into a jump, and a reduction in another valid order rounds it otherwise (tensorops seed
    6061: fmod(v, v.mean()) of 15 equal float32 values, eager's mean one ulp toward zero from
    them gives about 0, the compiled sum, closer to the exact mean, gives v; the float64 program
    sits on the jump at 0).  Each element is accepted where it is eager's or one such run's."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Nudge(TorchDispatchMode):
        def __init__(self, pos, k):
            super().__init__()
            self.pos, self.k, self.used = pos, k, False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            base = name.rstrip("_")
            where = JUMP_OPS.get(base, (0, 1) if base == "div" and kwargs.get("rounding_mode") else ())
            written = name.endswith("_") and self.pos == 0 or "out" in kwargs
            if self.pos in where and not written and self.pos < len(args):
                a = args[self.pos]
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    a = a * (1 + self.k * torch.finfo(a.dtype).eps)
                elif isinstance(a, float):
                    a = a * (1 + self.k * torch.finfo(torch.float32).eps)
                else:
                    return func(*args, **kwargs)
                self.used = True
                args = args[:self.pos] + (a,) + args[self.pos + 1:]
            return func(*args, **kwargs)

    runs = []
    for pos in (0, 1):
        for k in JUMP_EPS:
            for sign in (1, -1):
                mode = Nudge(pos, sign * k)
                with mode:
                    out, ins, exc = call(fn, tensors)
                if not mode.used:
                    break
                if exc is None:
                    runs.append(_leaves((out, ins)))
            if not mode.used:
                break
    if not runs:
        return False
    a_l, e_l = _leaves((got[0], got[1])), _leaves((want[0], want[1]))
    if len(a_l) != len(e_l):
        return False
    for j, (a, e) in enumerate(zip(a_l, e_l)):
        try:
            compare_values(a, e, "out", tol)
            continue
        except opinfo.Mismatch:
            pass
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or a.shape != e.shape or \
                a.dtype != e.dtype:
            return False
        cands = [e] + [r[j] for r in runs if len(r) == len(e_l) and isinstance(r[j], torch.Tensor)
                       and r[j].shape == e.shape and r[j].dtype == e.dtype]
        a = a.detach()
        ok = torch.zeros(a.shape, dtype=torch.bool)
        if a.is_floating_point():
            rtol = max(tol, TOL[str(a.dtype).split(".")[1]])
            ad = a.double()
            fin = e.detach().double().isfinite()
            scale = max(1.0, float(e.detach().double()[fin].abs().max())) if fin.any() else 1.0
            for c in cands:
                cd = c.detach().double()
                ok |= (ad.isnan() & cd.isnan()) | (ad == cd) | \
                    ((ad - cd).abs() <= rtol * scale + rtol * cd.abs())
        else:
            for c in cands:
                ok |= a == c.detach()
        if not bool(ok.all()):
            return False
    return True


def _eager_depends_on_layout(call, fn, tensors, got, want, tol) -> bool:
    """Whether eager's result on these inputs differs from eager's on contiguous copies of
    them while the compiled result `got` is the latter: eager's kernel reads the inputs' memory
    layout (torch.median along an expanded dim runs nth_element in place on memory the
    expanded elements share, its values and indices garbage: tensorops seed 371), so eager's
    result there is no reference (OpInfo's noncontiguous samples assume layout-independence).
    `want` is eager's (outputs, inputs[, exception]): eager raising where it returns on the
    contiguous copies (a cholesky of that garbage median) is such a difference too."""
    import torch

    if not any(isinstance(t, torch.Tensor) and not t.is_contiguous() for t in tensors):
        return False
    out, ins, exc = call(fn, [t.contiguous() if isinstance(t, torch.Tensor) else t for t in tensors])
    if exc is not None:
        return False
    if len(want) < 3 or want[2] is None:     # eager raised on these inputs: differs from `out` already
        try:
            compare_values(out, want[0], "out", tol)
            return False       # eager agrees with itself: the difference is the compiler's
        except opinfo.Mismatch:
            pass
    try:
        compare_values(got[0], out, "out", tol)
        compare_values(got[1], ins, "input", tol)
    except opinfo.Mismatch:
        return False
    return True


def _eager_irreproducible(call, fn, tensors, want, tol, tries=300, budget_s=5.0) -> bool:
    """Whether eager, run again on the same non-contiguous inputs, gives another result or
    raises otherwise than `want` (its outputs, inputs[, exception]): torch.median along an
    expanded dim reads memory it never wrote (tensorops seed 371), so its values change from
    run to run, sometimes the same twice in a row. There is no reference for such a call: the
    recording call, which runs eager's kernels, gets its own garbage (CI at 241eed2)."""
    import torch

    if not any(isinstance(t, torch.Tensor) and not t.is_contiguous() for t in tensors):
        return False
    wexc = want[2] if len(want) > 2 else None
    end = time.time() + budget_s
    for _ in range(tries):
        out, ins, exc = call(fn, tensors)
        if (exc is None) != (wexc is None) or (exc is not None and type(exc) is not type(wexc)):
            return True
        if exc is None:
            try:
                compare_values(out, want[0], "out", tol)
                compare_values(ins, want[1], "input", tol)
            except opinfo.Mismatch:
                return True
        if time.time() > end:
            break
    return False


# Ops whose result is memory nothing wrote: eager returns whatever the allocator held there
# (resize_ / resize_as_ growing a storage give the grown bytes so).
UNINITIALIZED_ALLOCS = frozenset(("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided",
                                  "empty_permuted"))


def _poison(dtype, k):
    """The k-th (0..2) fill of uninitialized memory of this dtype: values far apart, of both signs."""
    import torch

    if dtype == torch.bool:
        return k % 2 == 0
    if dtype.is_floating_point or dtype.is_complex:
        return (float("nan"), -2.5e3, 0.75)[k]
    info = torch.iinfo(dtype)
    return (info.max, info.min, 7)[k]


def _poisoned_call(call, fn, tensors, k):
    """call(fn, tensors) with the memory eager leaves uninitialized filled with _poison(dtype, k):
    UNINITIALIZED_ALLOCS' results, and the bytes a resize_ grows a storage by. Returns
    (call's result, whether any such memory was made)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Poison(TorchDispatchMode):
        used = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            if name in ("resize_", "resize_as_"):
                t = args[0]
                before = t.untyped_storage().nbytes()
                out = func(*args, **kwargs)
                st, isz = t.untyped_storage(), t.element_size()
                if st.nbytes() > before and t.layout == torch.strided:
                    Poison.used = True
                    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(st, 0, (st.nbytes() // isz,), (1,))
                    flat[-(-before // isz):].fill_(_poison(t.dtype, k))
                return out
            out = func(*args, **kwargs)
            if name in UNINITIALIZED_ALLOCS and isinstance(out, torch.Tensor) and out.numel():
                Poison.used = True
                torch.empty(0, dtype=out.dtype, device=out.device).set_(out.untyped_storage()).fill_(
                    _poison(out.dtype, k))
            return out

    with Poison():
        res = call(fn, tensors)
    return res, Poison.used


def _undefined_replaced(got, runs):
    """`got` with every element (every non-tensor value) on which the poisoned eager runs `runs`
    disagree replaced by runs[0]'s: the elements eager computes from memory nothing wrote. None
    where the runs disagree on a structure, shape or dtype (eager's result is undefined whole)."""
    import torch

    first = runs[0]
    if isinstance(first, torch.Tensor):
        if not all(isinstance(r, torch.Tensor) and r.shape == first.shape and r.dtype == first.dtype for r in runs):
            return None
        if not isinstance(got, torch.Tensor) or got.shape != first.shape or got.dtype != first.dtype:
            return got
        same = torch.ones(first.shape, dtype=torch.bool, device=first.device)
        a = first.detach()
        for r in runs[1:]:
            b = r.detach()
            same &= (a == b) | (a.isnan() & b.isnan()) if a.is_floating_point() or a.is_complex() else a == b
        return torch.where(same, got.detach(), a)
    if isinstance(first, (list, tuple)):
        if not all(isinstance(r, (list, tuple)) and len(r) == len(first) for r in runs):
            return None
        if not isinstance(got, (list, tuple)) or len(got) != len(first):
            return got
        parts = [_undefined_replaced(g, [r[i] for r in runs]) for i, g in enumerate(got)]
        return None if any(p is None for p in parts) else type(got)(parts) if type(got) in (list, tuple) else parts
    same = all(type(r) is type(first) and (r == first or (r != r and first != first)) for r in runs[1:])
    return got if same else first


def _eager_reads_uninitialized(call, fn, tensors, got, tol):
    """Whether the compiled result `got` (outputs, inputs) is eager's wherever eager's is defined:
    eager run three times with the memory it leaves uninitialized (resize_ growing an input's
    storage, torch.empty) filled with three values (_poisoned_call); an element on which those runs
    disagree is computed from that memory, undefined in eager too (edges seed 1844: a resize_ of an
    input grows its storage, the grown elements cast to uint8 came back as allocator garbage that
    changes from run to run), and is not compared. A difference anywhere else is still one, and so
    is a call whose poisoned runs raise or return other shapes (no reference: True only when the
    runs disagree on that)."""
    runs, used = [], False
    for k in range(3):
        res, u = _poisoned_call(call, fn, tensors, k)
        runs.append(res)
        used |= u
    if not used:
        return False
    excs = [r[2] for r in runs]
    if any(e is not None for e in excs):
        return not all(e is not None and type(e) is type(excs[0]) for e in excs)
    out = _undefined_replaced(got[0], [r[0] for r in runs])
    ins = _undefined_replaced(got[1], [r[1] for r in runs])
    if out is None or ins is None:
        return True
    try:
        compare_values(out, runs[0][0], "out", tol)
        compare_values(ins, runs[0][1], "input", tol)
    except opinfo.Mismatch:
        return False
    return True


def run_program(prog) -> dict:
    import warnings

    import torch

    import mlircap

    ns = program_namespace(prog)
    fn = ns["f"]
    mods = _module_state(ns)
    grad = bool(prog.get("grad"))
    sets = [make_inputs(prog), make_inputs(prog, alt=True)]
    if prog.get("v2"):
        sets.append(make_inputs(prog, alt="values"))

    def call(f, tensors):
        """(outputs, the inputs after the call, exception); under --grad the outputs are
        (forward outputs, every input's .grad, every parameter's .grad) after loss.backward();
        with modules, their buffers after the call follow."""
        ins = opinfo._clone(tensors)
        if grad:
            ins = [t.requires_grad_() if u.requires_grad else t for t, u in zip(ins, tensors)]
        with torch.no_grad():
            for m, state in mods:      # every call starts from the modules' initial state
                m.load_state_dict(state)
                for p in m.parameters():
                    p.grad = None
        torch.manual_seed(CALL_SEED)
        try:
            if grad:
                out = f(*ins)
                out[0].backward()
                res = (out, [t.grad for t in ins if isinstance(t, torch.Tensor) and t.requires_grad],
                       [p.grad for m, _ in mods for p in m.parameters()])
            else:
                with torch.no_grad():
                    res = f(*ins)
            if mods:
                res = (res, [b.detach().clone() for m, _ in mods for b in m.buffers()])
            return res, [t.detach() for t in ins], None
        except Exception as e:  # noqa: BLE001
            return None, [t.detach() for t in ins], e

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refs = [call(fn, sets[0]), call(fn, sets[0])] + [call(fn, st) for st in sets[1:]]
    meta_only = False
    if refs[0][2] is None:
        try:
            compare_values(refs[1][0], refs[0][0], "out")
        except opinfo.Mismatch:
            meta_only = True     # eager itself differs between two seeded runs
    refs = [refs[0]] + refs[2:]
    c = mlircap.compile(fn)
    log = io.StringIO()
    with warnings.catch_warnings(record=True) as wlist, contextlib.redirect_stderr(log):
        warnings.simplefilter("always")
        got = [call(c, sets[0]), call(c, sets[0])]
        status = opinfo.compiled_status(c, [str(w.message) for w in wlist], log.getvalue())
        got += [call(c, st) for st in sets[1:]]
    sys.stderr.write(log.getvalue()[-2000:])
    wheres = ("recording call", "replayed call", "call at the second shapes", "call at other values")
    notes = []
    for i, ((out, ins, exc), (eout, eins, eexc)) in enumerate(zip(got, [refs[0]] + refs), 1):
        where = wheres[i - 1]
        if eexc is not None:
            if exc is None:
                if _eager_depends_on_layout(call, fn, ([sets[0]] + sets)[i - 1], (out, ins), (eout, eins, eexc),
                                            prog.get("tol", 0.0)):
                    notes.append(f"{where}: eager raised {opinfo._exc_line(eexc)}; eager's own result depends on the "
                                 "inputs' memory layout (it returns on contiguous copies), compiled is eager's "
                                 "on contiguous copies")
                    continue
                if _eager_irreproducible(call, fn, ([sets[0]] + sets)[i - 1], (eout, eins, eexc),
                                         prog.get("tol", 0.0)):
                    notes.append(f"{where}: eager raised {opinfo._exc_line(eexc)}; eager's own result on these "
                                 "inputs' memory layout changes from run to run (raising on some): no reference")
                    continue
                return {"category": "error", "detail": f"{where}: eager raised {opinfo._exc_line(eexc)}; compiled returned"}
            if type(exc) is not type(eexc):
                return {"category": "error", "detail": f"{where}: eager raised {type(eexc).__name__}, compiled "
                                                       f"raised {opinfo._exc_line(exc)}"}
            continue
        if exc is not None:
            if _eager_irreproducible(call, fn, ([sets[0]] + sets)[i - 1], (eout, eins, eexc), prog.get("tol", 0.0)):
                notes.append(f"{where}: compiled raised {opinfo._exc_line(exc)}; eager's own result on these "
                             "inputs' memory layout changes from run to run (raising on some): no reference")
                continue
            return {"category": "error", "detail": f"{where}: compiled raised {opinfo._exc_line(exc)}",
                    "trace": "".join(traceback.format_exception(exc))[-3000:]}
        try:
            if meta_only and i < 3:
                opinfo.compare(out, eout, "out", None, meta_only=True)
            else:
                compare_values(out, eout, "out", prog.get("tol", 0.0))
                compare_values(ins, eins, "input", prog.get("tol", 0.0))
        except opinfo.Mismatch as m:
            if _eager_depends_on_layout(call, fn, ([sets[0]] + sets)[i - 1], (out, ins), (eout, eins),
                                        prog.get("tol", 0.0)):
                notes.append(f"{where}: {m}; eager's own result depends on the inputs' memory layout, "
                             "compiled is eager's on contiguous copies")
                continue
            if _eager_irreproducible(call, fn, ([sets[0]] + sets)[i - 1], (eout, eins, eexc), prog.get("tol", 0.0)):
                notes.append(f"{where}: {m}; eager's own result on these inputs' memory layout changes from "
                             "run to run: no reference")
                continue
            if _eager_reads_uninitialized(call, fn, ([sets[0]] + sets)[i - 1], (out, ins), prog.get("tol", 0.0)):
                notes.append(f"{where}: {m}; only where eager reads memory nothing wrote (a storage resize_ grew, "
                             "torch.empty): such elements are not compared")
                continue
            if _eager_depends_on_position(call, fn, ([sets[0]] + sets)[i - 1], (out, ins), prog.get("tol", 0.0)):
                notes.append(f"{where}: {m}; eager's own result depends on the elements' positions in its "
                             "kernel's loop (vector body or scalar remainder, a product's rows), compiled is "
                             "the rule that holds at every position")
                continue
            if _eager_near_jump(call, fn, ([sets[0]] + sets)[i - 1], (out, ins), (eout, eins), prog.get("tol", 0.0)):
                notes.append(f"{where}: {m}; only where eager's own result jumps when an operand of fmod / "
                             "remainder / floor / round ... moves by a few roundings")
                continue
            ref = None if not any(k in str(m) for k in ("values differ", "pattern differs", "shape/dtype")) else \
                fp64_reference(prog, ([sets[0]] + sets)[i - 1])
            tie_ref = None if ref is None or "shape/dtype" not in str(m) else \
                fp64_reference(prog, ([sets[0]] + sets)[i - 1], round_ties=True)
            if ref is None or not within_fp64_error((out, ins), (eout, eins), ref, prog.get("tol", 0.0),
                                                    tie_ref=tie_ref):
                return {"category": "wrong", "detail": f"{where}: {m}"}
            notes.append(f"{where}: {m}; within 2x eager's own error against float64")
    if status is None:
        return {"category": "compiled", "detail": None, **({"fp64": notes} if notes else {})}
    return {"category": "fallback", "detail": status, **({"fp64": notes} if notes else {})}


def worker_main(device: str) -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch

    torch.set_num_threads(1)
    import mlircap  # noqa: F401

    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        t0 = time.time()
        print(f"[fuzz] seed {task['seed']}", file=sys.stderr, flush=True)
        try:
            res = run_program(task["prog"])
        except Exception as e:  # noqa: BLE001 - the harness itself failed
            res = {"category": "error", "detail": f"harness: {opinfo._exc_line(e)}",
                   "trace": traceback.format_exc()[-3000:]}
        res["time"] = round(time.time() - t0, 3)
        proto.write(json.dumps(res) + "\n")


class FuzzWorker(opinfo.Worker):
    def __init__(self, device, env, logdir, n):    # noqa: D107 - opinfo.Worker running this file
        import subprocess

        self.log_path = os.path.join(logdir, f"worker{n}.log")
        self.log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=ROOT,
            start_new_session=True)
        self.buf = b""
        self.ready = False
        self.task = None
        self.deadline = None
        self.log_offset = 0
        self.done = 0
        self.started = time.time()


class FuzzPool(opinfo.Pool):
    def _spawn(self):
        self.nstarted += 1
        return FuzzWorker(self.device, self.env, self.tmp, self.nstarted)


def run_seeds(seeds, jobs=1, timeout=180.0, families=None, progress=True, grad=False):
    """Generates and runs the programs of the seeds; returns one record per seed."""
    return run_programs([generate(s, families, grad) for s in seeds], jobs, timeout, progress)


def run_programs(progs, jobs=1, timeout=180.0, progress=True):
    """Runs generated programs (of any modes) in one worker pool; one record per program."""
    tasks = [{"seed": p["seed"], "prog": p} for p in progs]
    with contextlib.redirect_stdout(sys.stdout if progress else io.StringIO()), FuzzPool("cpu", jobs, 200) as pool:
        recs = pool.run(tasks, timeout=timeout, progress=progress)
    for rec in recs:
        rec["category"] = {"ok": "compiled"}.get(rec["category"], rec["category"])
    return recs


def report(records, out=sys.stdout):
    p = (lambda s="": print(s, file=out))
    cnt = collections.Counter(r["category"] for r in records)
    labels = {"compiled": "compiled-correct", "fallback": "fallback-correct", "error": "error-differs"}
    p(f"{'programs':>9} " + " ".join(f"{labels.get(c, c):>16}" for c in CATEGORIES))
    p(f"{len(records):>9} " + " ".join(f"{cnt[c]:>16}" for c in CATEGORIES))
    fam = collections.defaultdict(collections.Counter)
    for r in records:
        for f in r["prog"]["families"]:
            fam[f][r["category"]] += 1
    p("\nprograms per family (a program counts in every family it uses):")
    for f in sorted(fam):
        p(f"  {f:>8}: " + " ".join(f"{c}={fam[f][c]}" for c in CATEGORIES if fam[f][c]))
    reasons = collections.Counter(opinfo._reason_key(r["detail"]) for r in records if r["category"] == "fallback")
    if reasons:
        p("\ntop fallback reasons:")
        for reason, n in reasons.most_common(10):
            p(f"  {n:>4}  {reason}")
    for r in records:
        if r["category"] in ("wrong", "crash", "error", "timeout"):
            p(f"\n=== seed {r['seed']}: {r['category'].upper()}: {r['detail']}")
            p(repro(r["prog"]))


def parse_seeds(text):
    out = []
    for part in text.split(","):
        if ":" in part:
            a, b = part.split(":")
            out += list(range(int(a), int(b)))
        elif part:
            out.append(int(part))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0:100", help="seeds: A:B ranges and numbers, comma-separated")
    ap.add_argument("--seed", type=int, help="one seed")
    ap.add_argument("--show", action="store_true", help="print the program(s), then run them")
    ap.add_argument("--families", help="comma-separated families or groups to draw from (default: generator v1's "
                                       "FAMILIES; groups of v2: " + ", ".join(GROUPS) + ")")
    ap.add_argument("--grad", action="store_true", help="training mode: inputs require grad, the outputs are "
                                                        "reduced to a loss, .backward(), every .grad compared")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--report", help="re-print the report of a --json file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main("cpu")
        return 0
    if a.report:
        with open(a.report) as f:
            report(json.load(f))
        return 0
    seeds = [a.seed] if a.seed is not None else parse_seeds(a.seeds)
    fams = a.families.split(",") if a.families else None
    if a.show:
        for s in seeds:
            print(repro(generate(s, fams, a.grad)))
    t0 = time.time()
    recs = run_seeds(seeds, a.jobs, a.timeout, fams, grad=a.grad)
    report(recs)
    print(f"\n{len(recs)} programs in {time.time() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f)
    return 1 if any(r["category"] in ("wrong", "crash", "error", "timeout") for r in recs) else 0


if __name__ == "__main__":
    sys.exit(main())
