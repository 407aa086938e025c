"""Capture benchmark, second corpus: idioms of public model code that bench/capture.py's
cases do not cover (configs as NamedTuple / SimpleNamespace / attribute dicts, ModuleDict
iteration, getattr-by-string dispatch, cooperative super() chains, functools helpers,
closures over loop variables, *args/**kwargs forwarding, try/except/finally in forward,
shape asserts, generators, dict.get/setdefault, global flags, class/static methods,
properties, enums, hand-written einops, is_scripting / is_compiling checks, hooks,
buffers written in place, lazily built module-level caches, ...).

The case machinery (runner, table, comparison with Dynamo) is bench/capture.py's:

    PYTHONPATH=python python bench/capture2.py [--no-dynamo] [--filter NAME]
"""
import collections
import contextlib
import dataclasses
import enum
import functools
import itertools
import math
import operator
import types
import typing

import torch
import torch.nn as nn
import torch.nn.functional as F

import capture as bench  # bench/capture.py: Python puts this script's directory first on sys.path

_FIRST = len(bench.CASES)
case, R = bench.case, bench.R
V8 = lambda: (R(4, 8),)  # noqa: E731
SEQ = lambda: (R(2, 6, 8),)  # noqa: E731


# ----------------------------------------------------------------------------- configs
class BlockCfg(typing.NamedTuple):
    dim: int = 8
    hidden: int = 16
    act: str = "gelu"
    dropout: float = 0.0
    residual: bool = True


class NamedTupleConfigBlock(nn.Module):
    """A NamedTuple config read field by field, one field replaced with _replace()."""
    def __init__(self, cfg=BlockCfg()):
        super().__init__()
        self.cfg = cfg._replace(hidden=cfg.hidden * 2)
        self.fc1 = nn.Linear(cfg.dim, self.cfg.hidden)
        self.fc2 = nn.Linear(self.cfg.hidden, cfg.dim)

    def forward(self, x):
        h = getattr(F, self.cfg.act)(self.fc1(x))
        h = F.dropout(h, self.cfg.dropout, self.training)
        return x + self.fc2(h) if self.cfg.residual else self.fc2(h)


@dataclasses.dataclass(frozen=True)
class StackCfg:
    dims: tuple = (8, 12, 8)
    norm: str = "layer"
    eps: float = 1e-5
    extra: dict = dataclasses.field(default_factory=lambda: {"scale": 0.5})


class FrozenDataclassStack(nn.Module):
    """A frozen dataclass with a default_factory field, replaced() once; the forward walks
    pairwise dims and reads cfg.extra.get()."""
    def __init__(self):
        super().__init__()
        self.cfg = dataclasses.replace(StackCfg(), eps=1e-6)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(self.cfg.dims, self.cfg.dims[1:]))
        self.norm = nn.LayerNorm(self.cfg.dims[-1], eps=self.cfg.eps)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.silu(x)
        return self.norm(x) * self.cfg.extra.get("scale", 1.0)


class AttrDict(dict):
    """yacs / easydict style: a dict whose keys read as attributes."""
    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None

    __setattr__ = dict.__setitem__


class AttrDictConfigModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = AttrDict(model=AttrDict(width=8, depth=2, act="relu"), loss=AttrDict(weight=0.3))
        self.layers = nn.ModuleList(nn.Linear(self.cfg.model.width, self.cfg.model.width)
                                    for _ in range(self.cfg.model.depth))

    def forward(self, x):
        for layer in self.layers:
            x = getattr(torch, self.cfg.model.act)(layer(x))
        return x * self.cfg.loss.weight


class SimpleNamespaceConfig(nn.Module):
    def __init__(self):
        super().__init__()
        self.args = types.SimpleNamespace(n_heads=2, d_model=8, attn_scale=None, causal=True)
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        a = self.args
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, a.n_heads, a.d_model // a.n_heads).unbind(2)
        scale = a.attn_scale or (a.d_model // a.n_heads) ** -0.5
        s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
        if a.causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        return torch.einsum("bhij,bjhd->bihd", s.softmax(-1), v).reshape(b, n, -1)


case("namedtuple_config_replace", SEQ)(lambda: NamedTupleConfigBlock())
case("frozen_dataclass_default_factory", V8)(lambda: FrozenDataclassStack())
case("attrdict_yacs_config", V8)(lambda: AttrDictConfigModel())
case("simplenamespace_args_attention", SEQ)(lambda: SimpleNamespaceConfig())


# ----------------------------------------------------------------------------- dispatch
class ModuleDictHeads(nn.Module):
    """Multi-task heads: ModuleDict iterated by .items(), results in a dict keyed by f-string."""
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.heads = nn.ModuleDict({"cls": nn.Linear(8, 3), "reg": nn.Linear(8, 1), "emb": nn.Linear(8, 4)})

    def forward(self, x):
        h = torch.relu(self.trunk(x))
        out = {}
        for name, head in self.heads.items():
            out[f"{name}_out"] = head(h)
        if "reg" in self.heads:
            out["reg_out"] = out["reg_out"].squeeze(-1)
        out["n_heads"] = len(self.heads)
        return out


class MethodNameDispatch(nn.Module):
    """getattr(self, f"_forward_{mode}") picks a method by a string attribute."""
    def __init__(self, mode="bilinear"):
        super().__init__()
        self.mode = mode
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def _forward_sum(self, x):
        return self.a(x) + self.b(x)

    def _forward_bilinear(self, x):
        return self.a(x) * self.b(x)

    def forward(self, x):
        fn = getattr(self, f"_forward_{self.mode}", None)
        if fn is None:
            raise ValueError(self.mode)
        return fn(x)


ACT2FN = {"gelu": nn.GELU, "relu": nn.ReLU, "swish": nn.SiLU, "gelu_new": functools.partial(nn.GELU, approximate="tanh")}


class Act2FnRegistry(nn.Module):
    """transformers' ACT2FN: a registry of classes (and a partial) built by name."""
    def __init__(self, names=("gelu_new", "swish", "relu")):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(8, 8) for _ in names)
        self.acts = nn.ModuleList(ACT2FN[n]() for n in names)

    def forward(self, x):
        for fc, act in zip(self.fcs, self.acts):
            x = act(fc(x))
        return x


class HasattrOptionalParts(nn.Module):
    """hasattr / getattr(self, name, default) probing optional submodules and attributes."""
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.gamma = nn.Parameter(torch.full((8,), 0.1))

    def forward(self, x):
        y = self.proj(x)
        if hasattr(self, "norm"):
            y = self.norm(y)
        if getattr(self, "gamma", None) is not None:
            y = y * self.gamma
        return x + y * getattr(self, "residual_scale", 1.0)


case("moduledict_items_fstring_keys", V8)(lambda: ModuleDictHeads())
case("getattr_method_dispatch", V8)(lambda: MethodNameDispatch())
case("act2fn_registry_partial", V8)(lambda: Act2FnRegistry())
case("hasattr_optional_parts", V8)(lambda: HasattrOptionalParts())


# ----------------------------------------------------------------------------- classes
class BaseBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x)


class NormMixin:
    def forward(self, x):
        y = super().forward(x)
        return F.layer_norm(y, y.shape[-1:])


class ScaleMixin:
    scale = 0.5

    def forward(self, x):
        return super().forward(x) * self.scale


class MixedBlock(ScaleMixin, NormMixin, BaseBlock):
    """Cooperative super() through two mixins (MRO: Scale -> Norm -> BaseBlock)."""
    def forward(self, x):
        return x + super().forward(x)


class Parent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, scale=1.0):
        return self.lin(x) * scale


class Child(Parent):
    def forward(self, x, scale=2.0):
        return super(Child, self).forward(torch.tanh(x), scale=scale) + 1


class GrandChild(Child):
    def forward(self, x):
        return super().forward(x) - Parent.forward(self, x)


class ClassAndStaticMethods(nn.Module):
    """@staticmethod helpers and a @classmethod reading class constants, from forward."""
    EPS = 1e-4
    GROUPS = 2

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @staticmethod
    def _l2(x, eps):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)

    @classmethod
    def _group_shape(cls, x):
        return (*x.shape[:-1], cls.GROUPS, x.shape[-1] // cls.GROUPS)

    def forward(self, x):
        y = self._l2(self.fc(x), self.EPS)
        g = y.view(self._group_shape(y))
        return type(self)._l2(g, ClassAndStaticMethods.EPS).flatten(-2)


class PropertyAccessors(nn.Module):
    """Properties computing derived sizes and the device/dtype of a parameter."""
    def __init__(self):
        super().__init__()
        self.n_heads, self.d_model = 2, 8
        self.qkv = nn.Linear(8, 24)

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def forward(self, x):
        x = x.to(self.dtype)
        b, n, _ = x.shape
        q, k, v = self.qkv(x).split(self.d_model, -1)
        q, k, v = (t.view(b, n, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        a = (q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)).softmax(-1) @ v
        return a.transpose(1, 2).reshape(b, n, self.d_model)


class CallableHelperObject:
    """A plain object with __call__ held by a module (not an nn.Module)."""
    def __init__(self, k):
        self.k = k
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x.clamp(-self.k, self.k)


class CallableHelperHolder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.clip = CallableHelperObject(0.5)

    def forward(self, x):
        return self.clip(self.fc(x)) + self.clip(x)


case("super_mixin_mro_chain", V8)(lambda: MixedBlock(8))
case("super_explicit_and_parent_call", V8)(lambda: GrandChild())
case("classmethod_staticmethod_helpers", V8)(lambda: ClassAndStaticMethods())
case("property_head_dim_dtype", SEQ)(lambda: PropertyAccessors())
case("callable_helper_object_counter", V8)(lambda: CallableHelperHolder())


# ----------------------------------------------------------------------------- functools / closures
@functools.lru_cache(maxsize=None)
def _relative_positions(n):
    """A cached table of Python ints (a relative-position bucket map)."""
    return tuple(tuple(max(-3, min(3, j - i)) + 3 for j in range(n)) for i in range(n))


class LruCacheRelPosBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Embedding(7, 2)
        self.qk = nn.Linear(8, 16)

    def forward(self, x):
        n = x.shape[1]
        idx = torch.tensor(_relative_positions(n))
        q, k = self.qk(x).chunk(2, -1)
        s = q @ k.transpose(1, 2)
        return s + self.bias(idx)[..., 0]


@functools.lru_cache(maxsize=4)
def _sinusoid_table(n, d):
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    t = torch.zeros(n, d)
    t[:, 0::2] = torch.sin(pos * div)
    t[:, 1::2] = torch.cos(pos * div)
    return t


class LruCacheTensorTable(nn.Module):
    """lru_cache over a function returning a tensor (the same tensor object each call)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x + _sinusoid_table(x.shape[1], x.shape[2]))


class ClosuresOverLoopVars(nn.Module):
    """Lambdas made in a loop: one binds i by default argument, one closes over it late."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.early = [lambda t, i=i: t * (i + 1) for i in range(3)]
        self.late = [lambda t: t + i for i in range(3)]

    def forward(self, x):
        h = self.fc(x)
        return sum(f(h) for f in self.early) + sum(g(h) for g in self.late)


class ClosureFactoryScale(nn.Module):
    """Functions returned by a factory inside forward, with nonlocal state."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        count = 0

        def make(scale):
            def f(t):
                nonlocal count
                count += 1
                return t * scale
            return f
        fs = [make(s) for s in (0.5, 1.0, 2.0)]
        h = self.fc(x)
        for f in fs:
            h = f(h) + h
        return h, count


class PartialAndReduce(nn.Module):
    """functools.partial for the norm layer, functools.reduce(operator.mul) for a numel,
    itertools.accumulate for offsets."""
    def __init__(self):
        super().__init__()
        norm = functools.partial(nn.GroupNorm, 2, eps=1e-3)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = norm(4)
        self.sizes = [1, 2, 1]

    def forward(self, x):
        h = self.norm(self.conv(x))
        n = functools.reduce(operator.mul, h.shape[1:], 1)
        flat = h.reshape(h.shape[0], n)
        offs = list(itertools.accumulate([0] + self.sizes))
        parts = [h[:, a:b].mean((1, 2, 3)) for a, b in zip(offs, offs[1:])]
        return flat.sum(1) / n + torch.stack(parts, -1).sum(-1)


case("lru_cache_relpos_int_table", SEQ)(lambda: LruCacheRelPosBias())
case("lru_cache_tensor_table", SEQ)(lambda: LruCacheTensorTable())
case("closures_over_loop_vars", V8)(lambda: ClosuresOverLoopVars())
case("closure_factory_nonlocal", V8)(lambda: ClosureFactoryScale())
case("partial_reduce_accumulate", lambda: (R(2, 3, 6, 6),))(lambda: PartialAndReduce())


# ----------------------------------------------------------------------------- call conventions
class InnerKw(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, mask=None, *, scale=1.0, return_hidden=False):
        h = self.fc(x) * scale
        if mask is not None:
            h = h.masked_fill(~mask[..., None], 0.0)
        return (h, x) if return_hidden else h


class ArgsKwargsForwarder(nn.Module):
    """A wrapper forwarding *args/**kwargs, adding and popping keyword arguments."""
    def __init__(self):
        super().__init__()
        self.inner = InnerKw()

    def _call(self, *args, **kwargs):
        kwargs.setdefault("scale", 0.5)
        return self.inner(*args, **kwargs)

    def forward(self, x, mask):
        opts = dict(return_hidden=True)
        h, _ = self._call(x, mask, **opts)
        out = self._call(h, scale=2.0)
        extra = {"mask": mask}
        return self._call(out, **extra, return_hidden=False)


def _seq_mask():
    m = torch.ones(2, 6, dtype=torch.bool)
    m[1, 4:] = False
    return R(2, 6, 8), m


class StarUnpackShapes(nn.Module):
    """*batch, n, d = x.shape; first, *rest = x.unbind(); torch.Size arithmetic."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        *batch, n, d = x.shape
        y = self.fc(x.reshape(-1, d)).reshape(*batch, n, d)
        first, *rest = y.unbind(1)
        new_shape = y.shape[:-1] + (2, d // 2)
        z = y.view(new_shape).sum(-1)
        return first + sum(rest), z


case("args_kwargs_forwarding", _seq_mask)(lambda: ArgsKwargsForwarder())
case("star_unpack_shapes", SEQ)(lambda: StarUnpackShapes())


# ----------------------------------------------------------------------------- control flow
class TryExceptOptional(nn.Module):
    """try/except AttributeError for an optional submodule, KeyError for a missing
    per-name scale, and a finally that counts calls."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scales = {"a": 0.5}
        self.calls = 0

    def forward(self, x):
        try:
            y = self.fc(x)
            try:
                y = self.post(y)
            except AttributeError:
                y = torch.relu(y)
            try:
                s = self.scales["b"]
            except KeyError:
                s = self.scales.get("a", 1.0)
            return y * s
        finally:
            self.calls += 1


class TryExceptRuntimeFallback(nn.Module):
    """A shape error raised by torch inside try, caught, and a fallback path taken."""
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 8))

    def forward(self, x):
        try:
            y = x @ self.w          # wrong inner dims: raises
        except RuntimeError:
            y = x @ self.w.t()
        return y


class AssertShapes(nn.Module):
    """assert on dim, shape and dtype with f-string messages, as model code checks inputs."""
    def __init__(self):
        super().__init__()
        self.d = 8
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        assert x.dim() == 3, f"expected (B, N, D), got {tuple(x.shape)}"
        assert x.shape[-1] == self.d, f"last dim {x.shape[-1]} != {self.d}"
        assert x.dtype in (torch.float32, torch.float16), x.dtype
        assert x.is_floating_point() and not x.is_complex()
        y = self.fc(x)
        assert y.shape == (*x.shape[:-1], 4)
        return y


class IsinstanceInputs(nn.Module):
    """A forward taking a list of tensors or a tensor, checked with isinstance."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, xs, y):
        if isinstance(xs, (list, tuple)):
            xs = torch.cat(xs, 0)
        elif not isinstance(xs, torch.Tensor):
            raise TypeError(type(xs))
        out = self.fc(xs)
        if isinstance(y, torch.Tensor) and y.numel() > 1:
            out = out + y.mean()
        return out


class ZipEnumerateReversedUNet(nn.Module):
    """A U-Net style decoder: encoder features collected, then consumed by
    enumerate(zip(self.ups, reversed(skips)))."""
    def __init__(self):
        super().__init__()
        self.downs = nn.ModuleList([nn.Conv2d(3, 4, 3, 2, 1), nn.Conv2d(4, 8, 3, 2, 1)])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(8, 4, 2, 2), nn.ConvTranspose2d(8, 3, 2, 2)])

    def forward(self, x):
        skips = []
        for d in self.downs:
            skips.append(x)
            x = F.relu(d(x))
        for i, (up, skip) in enumerate(zip(self.ups, reversed(skips))):
            x = up(x)
            if i < len(self.ups) - 1:
                x = torch.cat([x, skip[:, : x.shape[1]] * 0 + skips[-1 - i][:, :4]], 1)
            else:
                x = x + skip
        return x


class GeneratorWindows(nn.Module):
    """A generator helper yielding windows, consumed by sum() and by list()."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    @staticmethod
    def _windows(x, k, stride):
        for i in range(0, x.shape[-1] - k + 1, stride):
            yield i, x[..., i:i + k]

    def forward(self, x):
        total = sum(self.fc(w) for _, w in self._windows(x, 2, 2))
        starts = [i for i, _ in self._windows(x, 2, 3)]
        return total * len(starts), torch.tensor(starts)


class DictGetSetdefaultStats(nn.Module):
    """A per-module stats dict updated with setdefault/get in forward (Python numbers)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.stats = {}

    def forward(self, x, opts=None):
        opts = opts or {}
        self.stats.setdefault("calls", 0)
        self.stats["calls"] += 1
        self.stats.setdefault("shapes", []).append(tuple(x.shape))
        y = self.fc(x) * opts.get("scale", 2.0)
        return y, self.stats.get("calls")


class WhileLoopRefine(nn.Module):
    """A while loop with a Python counter and break on an int condition."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.max_iter = 4

    def forward(self, x):
        it = 0
        while True:
            x = x + 0.1 * torch.tanh(self.fc(x))
            it += 1
            if it >= self.max_iter:
                break
        else:
            x = x * 0
        return x


class RecursiveTree(nn.Module):
    """A recursive binary-tree module applied by a recursive method."""
    def __init__(self, depth=3):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.children_ = nn.ModuleList([RecursiveTree(depth - 1), RecursiveTree(depth - 1)]) if depth > 1 else None

    def _apply_tree(self, x, depth):
        h = torch.tanh(self.fc(x))
        if self.children_ is None:
            return h
        return h + sum(c._apply_tree(h, depth + 1) for c in self.children_) / (depth + 1)

    def forward(self, x):
        return self._apply_tree(x, 0)


case("try_except_optional_finally", V8)(lambda: TryExceptOptional())
case("try_except_runtime_fallback", V8)(lambda: TryExceptRuntimeFallback())
case("assert_shapes_fstrings", SEQ)(lambda: AssertShapes())
case("isinstance_list_input", lambda: ([R(2, 8), R(3, 8)], R(5)))(lambda: IsinstanceInputs())
case("zip_enumerate_reversed_unet", lambda: (R(1, 3, 8, 8),))(lambda: ZipEnumerateReversedUNet())
case("generator_windows_helper", lambda: (R(3, 9),))(lambda: GeneratorWindows())
case("dict_setdefault_stats", V8)(lambda: DictGetSetdefaultStats())
case("while_true_break_counter", V8)(lambda: WhileLoopRefine())
case("recursive_tree_module", V8)(lambda: RecursiveTree())


# ----------------------------------------------------------------------------- globals / enums / flags
USE_FAST_GELU = True
CONFIG = {"norm_first": True, "eps": 1e-5}
CALLS = 0


class GlobalFlagsBlock(nn.Module):
    """Global flags and a global config dict read in forward, a global counter written."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8, eps=CONFIG["eps"])

    def forward(self, x):
        global CALLS
        CALLS += 1
        h = self.norm(x) if CONFIG["norm_first"] else x
        h = self.fc(h)
        h = F.gelu(h, approximate="tanh") if USE_FAST_GELU else F.gelu(h)
        return h if CONFIG["norm_first"] else self.norm(h)


class Pool(enum.Enum):
    MEAN = "mean"
    MAX = "max"
    CLS = "cls"


class Feature(enum.IntFlag):
    NONE = 0
    NORM = 1
    RESIDUAL = 2
    GATE = 4


class EnumFlagsPooler(nn.Module):
    """Enum looked up by value (Pool("max")) and an IntFlag combination tested with &."""
    def __init__(self, pool="max", feats=Feature.NORM | Feature.GATE):
        super().__init__()
        self.pool = Pool(pool)
        self.feats = feats
        self.fc = nn.Linear(8, 8)
        self.gate = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if self.feats & Feature.NORM:
            h = F.normalize(h, dim=-1)
        if self.feats & Feature.GATE:
            h = h * torch.sigmoid(self.gate(x))
        if Feature.RESIDUAL in self.feats:
            h = h + x
        if self.pool is Pool.MEAN:
            return h.mean(1)
        if self.pool == Pool.MAX:
            return h.amax(1)
        return h[:, 0]


class ScriptingCompilingChecks(nn.Module):
    """torch.jit.is_scripting / is_tracing / torch.compiler.is_compiling branches choosing
    between two equal implementations (the public-code pattern for fused vs plain paths)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if torch.jit.is_scripting() or torch.jit.is_tracing():
            h = h * torch.sigmoid(h)
        elif torch.compiler.is_compiling():
            h = F.silu(h)
        else:
            h = h * torch.sigmoid(h)
        if not torch.compiler.is_dynamo_compiling():
            h = h + 0.0
        return h


class NoGradDebugBranch(nn.Module):
    """torch.is_grad_enabled() / torch.are_deterministic_algorithms_enabled() checks."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if torch.is_grad_enabled() and self.training:
            h = h * 0.5
        if torch.are_deterministic_algorithms_enabled():
            h = h + 1
        return h, torch.get_default_dtype() == torch.float32


case("global_flags_and_counter", V8)(lambda: GlobalFlagsBlock())
case("enum_by_value_and_intflag", SEQ)(lambda: EnumFlagsPooler())
case("enum_mean_residual", SEQ)(lambda: EnumFlagsPooler("mean", Feature.RESIDUAL))
case("is_scripting_is_compiling", V8)(lambda: ScriptingCompilingChecks())
case("grad_enabled_checks_train", V8, train=True)(lambda: NoGradDebugBranch())


# ----------------------------------------------------------------------------- tensors / shapes
def rearrange(x, pattern, **sizes):
    """A tiny einops.rearrange written by hand: 'b n (h d) -> b h n d' and the inverse."""
    lhs, rhs = (s.strip() for s in pattern.split("->"))

    def parse(side):
        out, group = [], None
        for tok in side.replace("(", " ( ").replace(")", " ) ").split():
            if tok == "(":
                group = []
            elif tok == ")":
                out.append(tuple(group))
                group = None
            elif group is not None:
                group.append(tok)
            else:
                out.append(tok)
        return out
    left, right = parse(lhs), parse(rhs)
    dims = dict(sizes)
    flat = []
    for ax, n in zip(left, x.shape):
        if isinstance(ax, tuple):
            known = math.prod(dims[a] for a in ax if a in dims)
            for a in ax:
                dims.setdefault(a, n // known)
            flat.extend(ax)
        else:
            dims[ax] = n
            flat.append(ax)
    x = x.reshape([dims[a] for a in flat])
    order = [a for ax in right for a in (ax if isinstance(ax, tuple) else (ax,))]
    x = x.permute([flat.index(a) for a in order])
    return x.reshape([math.prod(dims[a] for a in ax) if isinstance(ax, tuple) else dims[ax] for ax in right])


class HandEinopsAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)
        self.h = 2

    def forward(self, x):
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.h) for t in self.qkv(x).chunk(3, -1))
        a = F.scaled_dot_product_attention(q, k, v)
        return self.out(rearrange(a, "b h n d -> b n (h d)"))


class NewTensorFactories(nn.Module):
    """x.new_zeros / new_ones / new_tensor / new_full / type_as / finfo-based fills."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, mask):
        h = self.fc(x)
        bias = x.new_tensor([0.5, -0.5]).repeat(4)
        pad = h.new_zeros(h.shape[0], 1, h.shape[2])
        ones = h.new_ones(1).type_as(h)
        h = torch.cat([pad, h + bias * ones], 1)
        fill = torch.finfo(h.dtype).min
        m = torch.cat([mask.new_ones(mask.shape[0], 1), mask], 1)
        s = h.masked_fill(~m[..., None], fill)
        return s.max(1).values, h.new_full((2,), 3.0)


class FPadListComprehension(nn.Module):
    """F.pad amounts built with sum(list comprehension, []) from a target multiple."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.multiple = 4

    def forward(self, x):
        pads = [(-s) % self.multiple for s in x.shape[-2:]]
        amounts = sum([[0, p] for p in reversed(pads)], [])
        x = F.pad(x, amounts)
        return self.conv(x)


class DeviceDtypeChecks(nn.Module):
    """Branches on x.device.type, x.dtype, x.is_contiguous(), x.requires_grad."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if x.device.type == "cuda":
            x = x.half()
        if not x.is_contiguous():
            x = x.contiguous()
        if x.dtype == torch.float64:
            x = x.float()
        y = self.fc(x)
        if x.requires_grad:
            y = y * 2
        return y, str(x.device), x.dtype


case("hand_einops_rearrange_attention", SEQ)(lambda: HandEinopsAttention())
case("new_tensor_factories_finfo_fill", _seq_mask)(lambda: NewTensorFactories())
case("fpad_list_comprehension_multiple", lambda: (R(1, 3, 6, 7),))(lambda: FPadListComprehension())
case("device_dtype_contiguity_checks", lambda: (R(8, 4).t(),))(lambda: DeviceDtypeChecks())


# ----------------------------------------------------------------------------- hooks / buffers / caches
class FeatureExtractorHooks(nn.Module):
    """Forward hooks appending submodule outputs to a list the forward reads then clears
    (torchvision's IntermediateLayerGetter-by-hooks pattern)."""
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())
        self._feats = []
        for i in (0, 2):
            self.body[i].sink = self._feats
            self.body[i].register_forward_hook(lambda m, a, out: m.sink.append(out))

    def forward(self, x):
        y = self.body(x)
        feats = list(self._feats)
        self._feats.clear()
        return y, torch.stack(feats, 0)


class PreHookWithKwargs(nn.Module):
    """A forward pre-hook with_kwargs=True rewriting a keyword argument, and a hook that
    counts calls on the module."""
    def __init__(self):
        super().__init__()
        self.inner = InnerKw()
        self.inner.hook_calls = 0

        def pre(mod, args, kwargs):
            mod.hook_calls += 1
            kwargs = dict(kwargs)
            kwargs["scale"] = kwargs.get("scale", 1.0) * 3
            return args, kwargs
        self.inner.register_forward_pre_hook(pre, with_kwargs=True)

    def forward(self, x):
        return self.inner(x, scale=0.5)


class BufferInplaceEval(nn.Module):
    """Buffers written in place in eval mode: a call counter and an EMA of the input mean,
    plus a non-persistent buffer created lazily on the first call."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("n_calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(8))
        self.register_buffer("pos", None, persistent=False)

    def forward(self, x):
        self.n_calls += 1
        self.ema.mul_(0.9).add_(x.detach().mean(0), alpha=0.1)
        if self.pos is None or self.pos.shape[0] != x.shape[0]:
            self.pos = torch.arange(x.shape[0], dtype=x.dtype)
        return self.fc(x - self.ema) + self.pos[:, None]


_ROPE_CACHE = {}


def _rope(n, d, device, dtype):
    key = (n, d, device, dtype)
    if key not in _ROPE_CACHE:
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        f = torch.outer(torch.arange(n, device=device, dtype=torch.float32), inv)
        _ROPE_CACHE[key] = (f.cos().to(dtype), f.sin().to(dtype))
    return _ROPE_CACHE[key]


class ModuleLevelRopeCache(nn.Module):
    """A module-level (global) dict cache of rotary tables keyed by (n, d, device, dtype),
    filled lazily on the first call and reused."""
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        q = self.q(x)
        cos, sin = _rope(x.shape[1], x.shape[2], x.device, x.dtype)
        q1, q2 = q[..., 0::2], q[..., 1::2]
        return torch.stack((q1 * cos - q2 * sin, q1 * sin + q2 * cos), -1).flatten(-2)


class LazyGrowingRotaryAttr(nn.Module):
    """Rotary cos/sin cached on the module, built on first call and regrown when a longer
    sequence arrives (LLaMA's _set_cos_sin_cache with max_seq_len_cached)."""
    def __init__(self):
        super().__init__()
        self.max_seq_len_cached = 0
        self.cos_cached = self.sin_cached = None
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)), persistent=False)

    def _set_cache(self, n):
        self.max_seq_len_cached = n
        t = torch.arange(n, dtype=self.inv_freq.dtype)
        emb = torch.cat([torch.outer(t, self.inv_freq)] * 2, -1)
        self.cos_cached, self.sin_cached = emb.cos(), emb.sin()

    def forward(self, x):
        n = x.shape[1]
        if n > self.max_seq_len_cached:
            self._set_cache(n)
        cos, sin = self.cos_cached[:n], self.sin_cached[:n]
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat((-x2, x1), -1) * sin


class _GrowCalls:
    """Inputs whose sequence length grows then shrinks across the 3 calls."""
    n = 0

    def __call__(self):
        _GrowCalls.n += 1
        return (R(2, (4, 7, 5)[(_GrowCalls.n - 1) % 3], 8),)


class ContextManagerFlag(nn.Module):
    """A user @contextmanager toggling a module flag around a sub-call, and
    torch.autocast(enabled=False) around a precision-sensitive part."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fused = False

    @contextlib.contextmanager
    def _fused(self):
        old = self.fused
        self.fused = True
        try:
            yield self
        finally:
            self.fused = old

    def _act(self, h):
        return F.silu(h) if self.fused else h * torch.sigmoid(h)

    def forward(self, x):
        with self._fused() as me:
            a = me._act(self.fc(x))
        with torch.autocast("cpu", enabled=False):
            b = self._act(self.fc(x).float())
        return a + b, self.fused


case("feature_extractor_forward_hooks", V8)(lambda: FeatureExtractorHooks())
case("pre_hook_with_kwargs_counter", V8)(lambda: PreHookWithKwargs())
case("buffer_inplace_eval_lazy_buffer", V8)(lambda: BufferInplaceEval())
case("module_level_rope_cache", SEQ)(lambda: ModuleLevelRopeCache())
case("lazy_growing_rotary_attr", _GrowCalls())(lambda: LazyGrowingRotaryAttr())
case("contextmanager_flag_autocast_off", V8)(lambda: ContextManagerFlag())


# ----------------------------------------------------------------------------- modules walked
class ListCompOverModules(nn.Module):
    """Parallel branches (Inception-style) by list comprehension, then max over a generator
    of Python ints from the branches' sizes."""
    def __init__(self):
        super().__init__()
        self.branches = nn.ModuleList([nn.Conv2d(3, c, k, padding=k // 2) for c, k in ((2, 1), (3, 3), (4, 5))])

    def forward(self, x):
        outs = [F.relu(b(x)) for b in self.branches]
        widest = max(b.out_channels for b in self.branches)
        outs = [F.pad(o, (0, 0, 0, 0, 0, widest - o.shape[1])) for o in outs]
        return torch.stack(outs).sum(0)


class NamedParamsL2Penalty(nn.Module):
    """A weight-decay term over named_parameters() skipping biases and norms, added to the loss."""
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        out = self.fc2(self.norm(F.relu(self.fc1(x))))
        penalty = sum(p.pow(2).sum() for n, p in self.named_parameters() if not n.endswith("bias") and "norm" not in n)
        return out.logsumexp(-1).mean() + 1e-3 * penalty


class OptionalLayersNone(nn.Module):
    """A layer list with None entries skipped, layers chosen by a Python set of indices, and
    isinstance(m, nn.Identity) checks."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Identity(), nn.Linear(8, 8), nn.Identity()])
        self._skip = [None, None, nn.Linear(8, 8), None]   # (a plain list: not registered)
        self.active = {0, 2, 3}

    def forward(self, x):
        for i, (layer, sk) in enumerate(zip(self.layers, self._skip)):
            if i not in self.active or isinstance(layer, nn.Identity):
                continue
            y = layer(x)
            x = y + (sk(x) if sk is not None else x)
        return x


class SortedHeadsDictComp(nn.Module):
    """Heads sorted by name, outputs via a dict comprehension, names split on '_'."""
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"z_last": nn.Linear(8, 2), "a_first": nn.Linear(8, 3), "m_mid": nn.Linear(8, 1)})

    def forward(self, x):
        out = {k.split("_")[1]: self.heads[k](x) for k in sorted(self.heads.keys())}
        keep = {k: v for k, v in out.items() if v.shape[-1] > 1}
        return keep, ",".join(keep)


class SequentialSlicingIndexing(nn.Module):
    """nn.Sequential sliced (self.body[:2]) and indexed from the end (self.body[-1]),
    len() of a Sequential, and a ModuleList extended at construction."""
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8), nn.Tanh())
        self.extra = nn.ModuleList()
        self.extra.extend([nn.Linear(8, 8) for _ in range(2)])
        self.extra.insert(0, nn.LayerNorm(8))

    def forward(self, x):
        h = self.body[:2](x)
        h = self.body[-1](self.body[len(self.body) - 2](h))
        for m in self.extra[::-1]:
            h = m(h)
        return h


case("list_comprehension_branches_max", lambda: (R(1, 3, 6, 6),))(lambda: ListCompOverModules())
case("named_params_l2_penalty_train", V8, train=True)(lambda: NamedParamsL2Penalty())
case("optional_layers_none_identity", V8)(lambda: OptionalLayersNone())
case("sorted_heads_dict_comprehension", V8)(lambda: SortedHeadsDictComp())
case("sequential_slicing_indexing", V8)(lambda: SequentialSlicingIndexing())


# ----------------------------------------------------------------------------- more real-world bits
class EMAParamsZipNoGrad(nn.Module):
    """A teacher updated from the student's parameters by zip() under torch.no_grad() in
    forward (BYOL / DINO momentum update), then both run."""
    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
        self.teacher = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.m = 0.9

    def forward(self, x):
        with torch.no_grad():
            for pt, ps in zip(self.teacher.parameters(), self.student.parameters()):
                pt.mul_(self.m).add_(ps.detach(), alpha=1 - self.m)
        return self.student(x), self.teacher(x)


class StrMethodsRouting(nn.Module):
    """Submodule names tested with str methods (startswith, endswith, in, lower())."""
    def __init__(self):
        super().__init__()
        self.enc_a = nn.Linear(8, 8)
        self.enc_b = nn.Linear(8, 8)
        self.dec_Out = nn.Linear(8, 3)
        self.tag = "Encoder-v2"

    def forward(self, x):
        for name, m in self.named_children():
            if name.startswith("enc"):
                x = torch.relu(m(x))
        out = [m for n, m in self.named_children() if n.lower().endswith("out")][0](x)
        if "v2" in self.tag.lower():
            out = out * 2
        return out


class KwargsOnlyDefaults(nn.Module):
    """forward(x, *, temperature=1.0, topk=None) with a keyword default filled by None checks."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 10)

    def _logits(self, x, *, temperature=1.0, topk=None):
        logits = self.fc(x) / temperature
        if topk is not None:
            v, _ = logits.topk(topk, -1)
            logits = logits.masked_fill(logits < v[..., -1:], float("-inf"))
        return logits.softmax(-1)

    def forward(self, x):
        return self._logits(x, topk=3) + self._logits(x, temperature=0.5)


class ReprPrintFstring(nn.Module):
    """An f-string with shapes and a module repr built in forward but not printed (a debug
    message kept for an exception), plus __repr__ of a Python config."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.debug = False

    def forward(self, x):
        msg = f"{type(self).__name__}: in {list(x.shape)} -> {self.fc.out_features} ({self.fc!r})"
        y = self.fc(x)
        if self.debug:
            print(msg)
        return y, len(msg) > 0


class TorchFunctionalPoolDispatch(nn.Module):
    """A dict from string to functional (F.avg_pool2d / F.max_pool2d) with kwargs from a dict."""
    POOLS = {"avg": F.avg_pool2d, "max": F.max_pool2d}

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.cfg = [("max", {"kernel_size": 2}), ("avg", {"kernel_size": 2, "stride": 1})]

    def forward(self, x):
        x = self.conv(x)
        for kind, kw in self.cfg:
            x = self.POOLS[kind](x, **kw)
        return x


class ChunkedLossLoop(nn.Module):
    """A loss over chunks of the batch with Python accumulation and a running float."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(self, x, y):
        total, count = 0.0, 0
        for xs, ys in zip(x.split(3), y.split(3)):
            total = total + F.cross_entropy(self.fc(xs), ys, reduction="sum")
            count += ys.numel()
        return total / count


class ClsTokenExpandCat(nn.Module):
    """A ViT cls token expanded over the batch, cat, position embedding sliced by n + 1,
    and the tokens dropped by slicing at the end."""
    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.zeros(1, 1, 8))
        self.pos = nn.Parameter(torch.randn(1, 16, 8) * 0.02)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        b, n, _ = x.shape
        x = torch.cat((self.cls.expand(b, -1, -1), x), dim=1) + self.pos[:, : n + 1]
        x = self.fc(x)
        return x[:, 0], x[:, 1:]


class InterpolateToSkipSize(nn.Module):
    """F.interpolate(size=skip.shape[-2:]) between feature levels (FPN top-down)."""
    def __init__(self):
        super().__init__()
        self.lat = nn.ModuleList([nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 1)])

    def forward(self, x):
        feats = [x, F.avg_pool2d(x, 2)]
        lat = [l_(f) for l_, f in zip(self.lat, feats)]
        top = lat[-1]
        outs = [top]
        for f in reversed(lat[:-1]):
            top = f + F.interpolate(top, size=f.shape[-2:], mode="nearest")
            outs.insert(0, top)
        return tuple(outs)


def _xy_labels():
    return R(7, 8), torch.randint(0, 5, (7,))


case("ema_teacher_zip_no_grad", V8)(lambda: EMAParamsZipNoGrad())
case("str_methods_child_routing", V8)(lambda: StrMethodsRouting())
case("kwonly_defaults_topk", V8)(lambda: KwargsOnlyDefaults())
case("repr_fstring_not_printed", V8)(lambda: ReprPrintFstring())
case("functional_pool_dict_kwargs", lambda: (R(1, 3, 8, 8),))(lambda: TorchFunctionalPoolDispatch())
case("chunked_loss_python_accumulate", _xy_labels)(lambda: ChunkedLossLoop())
case("cls_token_expand_pos_slice", SEQ)(lambda: ClsTokenExpandCat())
case("fpn_interpolate_to_skip_size", lambda: (R(1, 3, 8, 8),))(lambda: InterpolateToSkipSize())


class OrderedDictOutput(nn.Module):
    """An OrderedDict of outputs with move_to_end and a defaultdict grouping."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 2)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        out = collections.OrderedDict(a=self.a(x), b=self.b(x))
        out.move_to_end("a")
        groups = collections.defaultdict(list)
        for k, v in out.items():
            groups[v.shape[-1]].append(v)
        out["sum"] = sum(groups[2])
        return out


class SlotsHelperState(nn.Module):
    """A helper object with __slots__ holding tensors and ints, updated in forward."""
    class State:
        __slots__ = ("h", "t")

        def __init__(self):
            self.h = None
            self.t = 0

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 8)
        self.state = self.State()

    def forward(self, x):
        st = self.State()
        for i in range(x.shape[1]):
            st.h = self.cell(x[:, i], st.h)
            st.t += 1
        return st.h, st.t


case("ordereddict_defaultdict_outputs", V8)(lambda: OrderedDictOutput())
case("slots_helper_state_gru", SEQ)(lambda: SlotsHelperState())

# ----------------------------------------------------------------------------- stateful Python objects
class CycleSchedule(nn.Module):
    """An itertools.cycle of scales on the module, advanced by next() every call."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.sched = itertools.cycle([1.0, 0.5, 0.25])

    def forward(self, x):
        return self.fc(x) * next(self.sched)


class CounterIds(nn.Module):
    """An itertools.count() handing out ids (per-call request ids), one per module (a global
    one would be shared by the eager and the captured copy here)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.ids = itertools.count(100)

    def forward(self, x):
        uid = next(self.ids)
        return self.fc(x), uid


class GeneratorAttrWarmup(nn.Module):
    """A generator object on the module yielding a warmup factor per call (made lazily)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.warm = None

    def forward(self, x):
        if self.warm is None:   # (made on the first call: a generator does not deepcopy)
            self.warm = (min(1.0, i / 3) for i in itertools.count(1))
        return self.fc(x) * next(self.warm)


class ClassAttrCounter(nn.Module):
    """A class attribute counter (type(self).instances_called += 1) and a bisect schedule of
    milestones on an int step attribute."""
    instances_called = 0

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.step = 0
        self.milestones = [1, 2, 4]

    def forward(self, x):
        import bisect
        type(self).instances_called += 1
        self.step += 1
        lr_like = 0.1 ** bisect.bisect_right(self.milestones, self.step)
        return self.fc(x) * lr_like


class DynamicSetattrCache(nn.Module):
    """setattr/getattr with f-string names, vars(self) and object.__setattr__ writes."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        n = x.shape[0]
        name = f"_mask_{n}"
        if not hasattr(self, name):
            setattr(self, name, torch.tril(torch.ones(n, n)))
        m = getattr(self, name)
        vars(self)["last_n"] = n
        object.__setattr__(self, "seen", True)
        return m @ self.fc(x)


class SortModulesByPriority(nn.Module):
    """A plain list of (priority, module) sorted in place every call by a key lambda."""
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self._order = [(2, "a"), (0, "b"), (1, "c")]

    def forward(self, x):
        self._order.sort(key=lambda t: t[0])
        for _, name in self._order:
            x = torch.tanh(getattr(self, name)(x))
        return x


case("itertools_cycle_schedule", V8)(lambda: CycleSchedule())
case("itertools_count_ids", V8)(lambda: CounterIds())
case("generator_attr_warmup", V8)(lambda: GeneratorAttrWarmup())
case("class_attr_counter_bisect", V8)(lambda: ClassAttrCounter())
case("dynamic_setattr_cache", V8)(lambda: DynamicSetattrCache())
case("sort_modules_by_priority", V8)(lambda: SortModulesByPriority())


# ----------------------------------------------------------------------------- inputs written
class InputMetadataInplace(nn.Module):
    """In-place metadata changes of an input (unsqueeze_ / transpose_), the input returned."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x.transpose_(0, 1)
        x.unsqueeze_(0)
        return self.fc(x), x


class InputListAppend(nn.Module):
    """A feature list passed in is appended to and returned (hook-style collectors)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, feats):
        h = self.fc(x)
        feats.append(h.mean(0))
        feats.insert(0, x.sum())
        return h, feats


class InputDictBatch(nn.Module):
    """Lightning-style: a batch dict in, predictions and loss written into it, dict returned."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, batch):
        batch["logits"] = self.fc(batch["x"])
        batch["loss"] = F.cross_entropy(batch["logits"], batch["y"])
        batch.pop("x")
        return batch


class ParamDataClampInplace(nn.Module):
    """WGAN weight clipping in forward: p.data.clamp_() on every parameter, and a
    lazy first-call init with nn.init under a flag."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.initialized = False

    def forward(self, x):
        if not self.initialized:
            nn.init.orthogonal_(self.fc.weight)
            nn.init.zeros_(self.fc.bias)
            self.initialized = True
        for p in self.parameters():
            p.data.clamp_(-0.3, 0.3)
        return self.fc(x)


case("input_metadata_inplace", lambda: (R(4, 3),))(lambda: InputMetadataInplace())
case("input_list_append_insert", lambda: (R(4, 8), [R(8)]))(lambda: InputListAppend())
case("input_dict_batch_written", lambda: ({"x": R(4, 8), "y": torch.randint(0, 3, (4,))},))(
    lambda: InputDictBatch())
case("param_data_clamp_lazy_init", V8)(lambda: ParamDataClampInplace())


# ----------------------------------------------------------------------------- torch APIs in forward
class LazyLinearModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(3))

    def forward(self, x):
        return self.body(x)


class DistributionsPolicy(nn.Module):
    """A Gaussian policy: Normal(mu, std).rsample(), log_prob, entropy; tanh squashing."""
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(8, 2)
        self.log_std = nn.Parameter(torch.zeros(2))

    def forward(self, x):
        d = torch.distributions.Normal(self.mu(x), self.log_std.exp())
        a = d.rsample()
        logp = d.log_prob(a).sum(-1) - torch.log(1 - torch.tanh(a) ** 2 + 1e-6).sum(-1)
        return torch.tanh(a), logp, d.entropy().mean()


class CategoricalHead(nn.Module):
    """Categorical(logits=).entropy(), log_prob of the argmax, probs."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        d = torch.distributions.Categorical(logits=self.fc(x))
        a = d.probs.argmax(-1)
        return d.log_prob(a), d.entropy(), d.probs


class GradientPenaltyCritic(nn.Module):
    """WGAN-GP: torch.autograd.grad of the critic w.r.t. an interpolate, create_graph=True."""
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, real, fake):
        eps = torch.rand(real.shape[0], 1)
        xi = (eps * real + (1 - eps) * fake).requires_grad_(True)
        out = self.critic(xi)
        g, = torch.autograd.grad(out.sum(), xi, create_graph=True)
        gp = ((g.norm(2, dim=1) - 1) ** 2).mean()
        return self.critic(fake).mean() - self.critic(real).mean() + 10 * gp


class FunctionalCallEnsemble(nn.Module):
    """torch.func.functional_call with a params dict built from named_parameters (MAML-style
    fast weights, one scaled copy)."""
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(self, x):
        params = {n: p * 0.9 for n, p in self.net.named_parameters()}
        return torch.func.functional_call(self.net, params, (x,)) + self.net(x)


class VmapPerSample(nn.Module):
    """torch.vmap over a per-sample function using a parameter (in_dims=(0, None))."""
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 4))

    def _one(self, x, w):
        return torch.tanh(x @ w).sum()

    def forward(self, x):
        return torch.vmap(self._one, in_dims=(0, None))(x, self.w)


class IterateTensorRows(nn.Module):
    """for row in x: (iterating a tensor) and len(x), building a list stacked back."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        outs = []
        for i, row in enumerate(x):
            outs.append(self.fc(row) * (i + 1) / len(x))
        return torch.stack(outs)


@torch.compiler.disable
def _host_side_stat(t):
    return t.abs().max()


class CompilerDisabledHelper(nn.Module):
    """A helper marked torch.compiler.disable (Dynamo-aware public code) called from forward."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return h / (_host_side_stat(h) + 1)


class TorchCheckAssert(nn.Module):
    """torch._assert and torch._check on shapes (torch.fx-friendly asserts)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        torch._assert(x.shape[-1] == 8, "last dim must be 8")
        torch._check(x.dim() == 2, lambda: f"bad dim {x.dim()}")
        return self.fc(x)


@torch.jit.script
def _scripted_swish(x: torch.Tensor, beta: float) -> torch.Tensor:
    return x * torch.sigmoid(beta * x)


class JitScriptedHelper(nn.Module):
    """A @torch.jit.script function called from an eager forward."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return _scripted_swish(self.fc(x), 1.5)


class CachedPropertyMask(nn.Module):
    """functools.cached_property building a buffer-like tensor on first access."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @functools.cached_property
    def causal(self):
        return torch.ones(6, 6, dtype=torch.bool).tril()

    def forward(self, x):
        s = self.fc(x) @ x.transpose(1, 2)
        return s.masked_fill(~self.causal, -1e4).softmax(-1)


class GradModeContexts(nn.Module):
    """torch.set_grad_enabled(self.training), torch.inference_mode()-free eval path, and
    torch.enable_grad() inside no_grad."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.g = nn.Linear(8, 8)

    def forward(self, x):
        with torch.set_grad_enabled(self.training):
            h = self.fc(x)
        with torch.no_grad():
            t = self.g(x)
            with torch.enable_grad():
                u = self.g(h)
        return h + t + u, h.requires_grad, t.requires_grad


class TensorRegisterHookTrain(nn.Module):
    """A gradient-clipping hook registered on an activation in train mode."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if h.requires_grad:
            h.register_hook(lambda g: g.clamp(-0.1, 0.1))
        return torch.relu(h)


case("lazy_linear_model", V8)(lambda: LazyLinearModel())
case("distributions_normal_policy_train", V8, train=True)(lambda: DistributionsPolicy())
case("distributions_categorical_head", V8)(lambda: CategoricalHead())
case("wgan_gradient_penalty_train", lambda: (R(4, 8), R(4, 8)), train=True)(lambda: GradientPenaltyCritic())
case("functional_call_fast_weights", V8)(lambda: FunctionalCallEnsemble())
case("vmap_per_sample_param", V8)(lambda: VmapPerSample())
case("iterate_tensor_rows", V8)(lambda: IterateTensorRows())
case("compiler_disable_helper", V8)(lambda: CompilerDisabledHelper())
case("torch_check_assert", V8)(lambda: TorchCheckAssert())
case("jit_scripted_helper", V8)(lambda: JitScriptedHelper())
case("cached_property_mask", SEQ)(lambda: CachedPropertyMask())
case("grad_mode_contexts_train", V8, train=True)(lambda: GradModeContexts())
case("grad_mode_contexts_eval", V8)(lambda: GradModeContexts())
case("tensor_register_hook_train", V8, train=True)(lambda: TensorRegisterHookTrain())


# ----------------------------------------------------------------------------- language features
class MatchStatementMode(nn.Module):
    """A match statement on a string mode and on a tuple of (kind, size)."""
    def __init__(self, mode="gated", spec=("pool", 2)):
        super().__init__()
        self.mode, self.spec = mode, spec
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        h = self.fc(x)
        match self.mode:
            case "gated":
                a, b = h.chunk(2, -1)
                h = a * torch.sigmoid(b)
            case "plain" | "linear":
                h = h[..., :8]
            case _:
                raise ValueError(self.mode)
        match self.spec:
            case ("pool", k) if k > 1:
                h = F.avg_pool1d(h[:, None], k)[:, 0]
            case ("none", _):
                pass
        return h


class WalrusAndComprehensions(nn.Module):
    """Walrus in a comprehension, set and dict comprehensions, any/all over Python values."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.keep = {0, 2}

    def forward(self, x):
        outs = [y for i, l_ in enumerate(self.layers) if i in self.keep and (y := l_(x)) is not None]
        widths = {o.shape[-1] for o in outs}
        by_idx = {i: o for i, o in zip(sorted(self.keep), outs)}
        if all(w == 8 for w in widths) and any(i > 1 for i in by_idx):
            return sum(outs, torch.zeros_like(x)), by_idx
        return x, by_idx


@functools.singledispatch
def to_features(x):
    raise TypeError(type(x))


@to_features.register
def _(x: torch.Tensor):
    return x


@to_features.register
def _(x: list):
    return torch.cat([to_features(t) for t in x], 0)


class SingleDispatchInputs(nn.Module):
    """functools.singledispatch on the input's type (tensor or list of tensors)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, xs, y):
        return self.fc(to_features(xs)), self.fc(to_features(y))


class DelegatingWrapper(nn.Module):
    """__getattr__ on an nn.Module subclass falling back to the wrapped module's attributes
    (model wrappers exposing .config / .generate of the inner model)."""
    def __init__(self):
        super().__init__()
        self.module = nn.Linear(8, 8)
        self.module.scale = 0.5

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def forward(self, x):
        return self.module(x) * self.scale + self.bias


class DataclassPostInitOutput(nn.Module):
    """An output dataclass whose __post_init__ derives fields from tensors, then replaced()."""
    @dataclasses.dataclass
    class Out:
        logits: torch.Tensor
        probs: torch.Tensor = None
        top: int = 0

        def __post_init__(self):
            if self.probs is None:
                self.probs = self.logits.softmax(-1)

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        out = self.Out(self.fc(x))
        return dataclasses.replace(out, top=3), [f.name for f in dataclasses.fields(out)]


class CopyConfigThenMutate(nn.Module):
    """copy.copy of a config dict mutated locally (the original stays), dict | merge."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.defaults = {"scale": 1.0, "bias": 0.0}

    def forward(self, x, boost):
        import copy
        cfg = copy.copy(self.defaults)
        cfg["scale"] *= 2
        cfg = cfg | {"bias": 0.5}
        y = self.fc(x) * cfg["scale"] + cfg["bias"] * boost
        return y, self.defaults["scale"]


class ContextVarTrainingFlag(nn.Module):
    """A contextvars.ContextVar set in forward (token reset in finally) read by a helper."""
    _flag = __import__("contextvars").ContextVar("fast_path", default=False)

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def _act(self, h):
        return F.silu(h) if self._flag.get() else h * torch.sigmoid(h) * 0.5

    def forward(self, x):
        tok = self._flag.set(True)
        try:
            a = self._act(self.fc(x))
        finally:
            self._flag.reset(tok)
        return a + self._act(x)


class PadSequenceFromSlices(nn.Module):
    """pad_sequence over a list of slices of Python-int lengths, then a packed-style mask."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.lengths = [3, 5, 2]

    def forward(self, x):
        seqs, off = [], 0
        for n in self.lengths:
            seqs.append(x[off:off + n])
            off += n
        padded = nn.utils.rnn.pad_sequence(seqs, batch_first=True)
        mask = torch.arange(padded.shape[1])[None] < torch.tensor(self.lengths)[:, None]
        return (self.fc(padded) * mask[..., None]).sum(1) / torch.tensor(self.lengths)[:, None]


case("match_statement_modes", V8)(lambda: MatchStatementMode())
case("match_statement_plain", V8)(lambda: MatchStatementMode("linear", ("none", 0)))
case("walrus_set_dict_comprehensions", V8)(lambda: WalrusAndComprehensions())
case("singledispatch_input_types", lambda: ([R(2, 8), R(3, 8)], R(4, 8)))(lambda: SingleDispatchInputs())
case("getattr_delegating_wrapper", V8)(lambda: DelegatingWrapper())
case("dataclass_post_init_replace", V8)(lambda: DataclassPostInitOutput())
case("copy_config_dict_merge", lambda: (R(4, 8), R(4, 8)))(lambda: CopyConfigThenMutate())
case("contextvar_flag_reset", V8)(lambda: ContextVarTrainingFlag())
case("pad_sequence_from_slices", lambda: (R(10, 8),))(lambda: PadSequenceFromSlices())


# ----------------------------------------------------------------------------- containers as state
class SeenShapesSet(nn.Module):
    """A set attribute recording the batch sizes seen; a branch on whether this one is new."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.seen = set()

    def forward(self, x):
        first = x.shape[0] not in self.seen
        self.seen.add(x.shape[0])
        return self.fc(x) * (2.0 if first else 1.0), len(self.seen)


class FifoQueueList(nn.Module):
    """A FIFO of detached activations in a list attribute: append, pop(0) past 2 entries."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.queue = []

    def forward(self, x):
        h = self.fc(x)
        self.queue.append(h.detach())
        if len(self.queue) > 2:
            self.queue.pop(0)
        return h + torch.stack(self.queue).mean(0)


class HeapTopScores(nn.Module):
    """heapq over Python floats kept on the module (a top-3 of per-call constants)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.heap = []
        self.calls = 0

    def forward(self, x):
        import heapq
        self.calls += 1
        heapq.heappush(self.heap, -float(self.calls) * 0.5)
        if len(self.heap) > 3:
            heapq.heappop(self.heap)
        return self.fc(x) * -self.heap[0]


class CounterAndDefaultdict(nn.Module):
    """collections.Counter and defaultdict(list) attributes: counts incremented by key and a
    history whose missing keys the subscript itself creates (__missing__)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.counts = collections.Counter()
        self.hist = collections.defaultdict(list)

    def forward(self, x):
        key = "big" if x.shape[0] > 2 else "small"
        self.counts[key] += 1
        self.hist[key].append(x.shape[0])
        n = len(self.hist["never_written"])   # a read that inserts the key
        return self.fc(x) * self.counts[key], n, dict(self.counts), sorted(self.hist)


class MutableDefaultCache(nn.Module):
    """A helper with a mutable default argument used as a cache across calls."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @staticmethod
    def _positions(n, _cache={}):
        if n not in _cache:
            _cache[n] = torch.arange(n, dtype=torch.float32)
        return _cache[n]

    def forward(self, x):
        return self.fc(x) + self._positions(x.shape[-1])


class SizeKeyedMaskCache(nn.Module):
    """Masks cached in a dict keyed by torch.Size (x.shape) and by an f-string key."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self._masks = {}

    def forward(self, x):
        if x.shape not in self._masks:
            self._masks[x.shape] = torch.ones(x.shape).tril()
            self._masks[f"{x.shape[0]}x{x.shape[1]}"] = True
        return self.fc(x) * self._masks[x.shape], len(self._masks)


case("seen_shapes_set", V8)(lambda: SeenShapesSet())
case("fifo_queue_list_pop0", V8)(lambda: FifoQueueList())
case("heapq_top_scores", V8)(lambda: HeapTopScores())
case("counter_and_defaultdict", V8)(lambda: CounterAndDefaultdict())
case("mutable_default_arg_cache", V8)(lambda: MutableDefaultCache())
case("size_keyed_mask_cache", V8)(lambda: SizeKeyedMaskCache())


# ----------------------------------------------------------------------------- descriptors / dunder overrides
class PropertySetterTemperature(nn.Module):
    """A property with a setter clamping the value into a private attribute, assigned in
    forward (an annealed temperature)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self._temperature = 1.0

    @property
    def temperature(self):
        return self._temperature

    @temperature.setter
    def temperature(self, v):
        self._temperature = max(0.25, float(v))

    def forward(self, x):
        self.temperature = self.temperature * 0.5
        return (self.fc(x) / self.temperature).softmax(-1)


class ValidatingSetattr(nn.Module):
    """__setattr__ overridden to validate and count attribute writes (config objects)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.writes = 0
        self.mode = "a"

    def __setattr__(self, name, value):
        if name == "mode" and value not in ("a", "b"):
            raise ValueError(value)
        if name not in ("writes", "training") and "writes" in self.__dict__:
            object.__setattr__(self, "writes", self.writes + 1)
        super().__setattr__(name, value)

    def forward(self, x):
        self.mode = "b" if self.mode == "a" else "a"
        return self.fc(x) * (1.0 if self.mode == "a" else -1.0)


class CallOverride(nn.Module):
    """A module overriding __call__ (not forward) around nn.Module.__call__."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs) * 2

    def forward(self, x):
        return self.fc(x)


class CallOverrideHolder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = CallOverride()

    def forward(self, x):
        return self.inner(x) + 1


class AttrgetterMapItemgetter(nn.Module):
    """operator.attrgetter on dotted names, map() over heads, itemgetter sort of floats."""
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(8, 8))
        self.heads = nn.ModuleList(nn.Linear(8, 2) for _ in range(3))
        self.prio = {"a": 0.3, "b": 0.1, "c": 0.2}

    def forward(self, x):
        w = operator.attrgetter("enc.0.weight")(self)
        h = x @ w.t()
        outs = torch.stack(list(map(lambda m: m(h), self.heads)))
        order = [k for k, _ in sorted(self.prio.items(), key=operator.itemgetter(1))]
        return outs.sum(0), order


class SliceAttrAndEllipsis(nn.Module):
    """slice objects stored as attributes, Ellipsis / None indexing, flip for a negative step."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.even, self.tail = slice(0, None, 2), slice(-3, None)

    def forward(self, x):
        h = self.fc(x)
        return h[..., self.even], h[self.tail, None, :].flip(0), h[:, ::-1 if False else 1]


class ClosureOverTensorInForward(nn.Module):
    """Nested functions defined in forward closing over tensors and a no_grad-decorated one."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        b = self.fc.bias * 2

        def add_bias(t):
            return t + b

        @torch.no_grad()
        def stat(t):
            return t.std()
        h = add_bias(self.fc(x))
        return h / (stat(h) + 1), add_bias(x)


case("property_setter_temperature", V8)(lambda: PropertySetterTemperature())
case("validating_setattr_override", V8)(lambda: ValidatingSetattr())
case("call_override_submodule", V8)(lambda: CallOverrideHolder())
case("attrgetter_map_itemgetter", V8)(lambda: AttrgetterMapItemgetter())
case("slice_attrs_ellipsis_none", V8)(lambda: SliceAttrAndEllipsis())
case("closure_over_tensor_in_forward", V8)(lambda: ClosureOverTensorInForward())


# ----------------------------------------------------------------------------- structured inputs / lazy submodules
class Batch(typing.NamedTuple):
    x: torch.Tensor
    mask: typing.Optional[torch.Tensor] = None


@dataclasses.dataclass
class DCBatch:
    x: torch.Tensor
    scale: float = 1.0
    meta: dict = dataclasses.field(default_factory=dict)


class StructuredInputs(nn.Module):
    """A NamedTuple batch with an optional field and a dataclass batch with a dict field
    (one object shared by both runs here: read, not written)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, b, d):
        h = self.fc(b.x)
        if b.mask is not None:
            h = h * b.mask[:, None]
        return h + self.fc(d.x) * d.scale, d.meta.get("tag", "none")


def _structured():
    return (Batch(R(4, 8), None), DCBatch(R(4, 8), 0.5, {}))


class LazyHeadCreation(nn.Module):
    """A head module created in forward on the first call (sized from the input), then reused."""
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)

    def forward(self, x):
        h = self.body(x)
        if not hasattr(self, "head"):
            self.head = nn.Linear(h.shape[-1], 3)
        return self.head(h)


class RegisterBufferInForward(nn.Module):
    """register_buffer called in forward on the first call with a computed tensor."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if "scale" not in self._buffers:
            self.register_buffer("scale", x.detach().abs().mean(0))
        return self.fc(x) / (self.scale + 1)


case("structured_namedtuple_dataclass_inputs", _structured)(lambda: StructuredInputs())
case("lazy_head_created_in_forward", V8)(lambda: LazyHeadCreation())
case("register_buffer_in_forward", V8)(lambda: RegisterBufferInForward())


# ----------------------------------------------------------------------------- state changed between calls
class KnobsModel(nn.Module):
    """A model whose knobs a training script changes between calls (mutate): a float and a
    str attribute, a config dict, an enum, an activation submodule, a closure's list cell,
    a frozen dataclass config, the layer list, a partial's keywords, weights, hooks, modes."""
    SCALE = 1.0

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.alpha = 1.0
        self.norm_kind = "layer"
        self.cfg = {"residual": True, "drop_last": False}
        self.pool = Pool.MEAN
        self.layers = nn.ModuleList([nn.Linear(8, 8)])
        self.frozen = StackCfg()
        box = [1.0]
        self._box = box
        self.gain = lambda t: t * box[0]
        self.leaky = functools.partial(F.leaky_relu, negative_slope=0.1)

    def forward(self, x):
        h = self.act(self.fc(x)) * self.alpha * type(self).SCALE
        h = F.layer_norm(h, h.shape[-1:]) if self.norm_kind == "layer" else F.normalize(h, dim=-1)
        for layer in self.layers:
            h = h + layer(h)
        if self.cfg["residual"]:
            h = h + x
        h = self.gain(self.leaky(h)) * self.frozen.extra.get("scale", 1.0)
        return h.mean(0) if self.pool is Pool.MEAN else h.amax(0)


def _knob(change):
    def mutate(m, i):
        if i == 2:
            change(m)
    return mutate


def _set_partial_slope(m):
    m.leaky.keywords["negative_slope"] = 0.5


_KNOBS = {
    "float_attr": lambda m: setattr(m, "alpha", 0.25),
    "str_attr": lambda m: setattr(m, "norm_kind", "l2"),
    "config_dict_item": lambda m: m.cfg.__setitem__("residual", False),
    "enum_attr": lambda m: setattr(m, "pool", Pool.MAX),
    "submodule_swap": lambda m: setattr(m, "act", nn.Tanh()),
    "closure_list_cell": lambda m: m._box.__setitem__(0, 3.0),
    "frozen_dataclass_replaced": lambda m: setattr(m, "frozen", dataclasses.replace(m.frozen, extra={"scale": 4.0})),
    "layer_appended": lambda m: (torch.manual_seed(7), m.layers.append(nn.Linear(8, 8))),   # same weights in both copies
    "partial_keywords": _set_partial_slope,
    "weight_scaled_in_place": lambda m: m.fc.weight.data.mul_(0.5),
    "parameter_replaced": lambda m: setattr(m.fc, "weight", nn.Parameter(torch.ones(8, 8) * 0.1)),
    "eval_mode_switch": lambda m: m.eval(),
    "forward_hook_added": lambda m: m.fc.register_forward_hook(lambda mod, a, out: out * 2),
    "frozen_weights_requires_grad": lambda m: m.fc.weight.requires_grad_(False),
}
for _k, _fn in _KNOBS.items():
    case(f"between_calls_{_k}", V8, mutate=_knob(_fn))(lambda: KnobsModel())


class GlobalFlagFlip(nn.Module):
    """A global flag flipped by the training script between calls."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return F.gelu(self.fc(x), approximate="tanh" if USE_FAST_GELU else "none") * CONFIG["eps"] * 1e5


def _flip_global(m, i):
    global USE_FAST_GELU
    if i == 0:
        USE_FAST_GELU, CONFIG["eps"] = True, 1e-5
    if i == 2:
        USE_FAST_GELU, CONFIG["eps"] = False, 2e-5


case("between_calls_global_flag_and_dict", V8, mutate=_flip_global)(lambda: GlobalFlagFlip())


class TrainEvalDropoutToggle(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


case("between_calls_train_to_eval", V8, train=True, mutate=lambda m, i: m.eval() if i == 2 else None)(
    lambda: TrainEvalDropoutToggle())


# ----------------------------------------------------------------------------- Python numbers that change every call
class FloatToTensorFactories(nn.Module):
    """A float attribute annealed every call, made into tensors (torch.tensor, torch.full,
    new_tensor) and used through math functions."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.t = 1.0

    def forward(self, x):
        scale = torch.tensor(self.t)
        bias = torch.full((8,), math.sqrt(self.t))
        pair = x.new_tensor([self.t, 1 - self.t])
        self.t = self.t * 0.8
        return self.fc(x) * scale + bias + pair.sum() * math.exp(-self.t)


class NoamScheduleInForward(nn.Module):
    """Noam / inverse-sqrt warmup from an int step counter: min(step ** -0.5, step * warmup ** -1.5)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.step = 0
        self.warmup = 2

    def forward(self, x):
        self.step += 1
        lr = 8 ** -0.5 * min(self.step ** -0.5, self.step * self.warmup ** -1.5)
        return self.fc(x) * lr, lr


class IntFromFloatSliceLength(nn.Module):
    """An int computed from a float attribute (int(self.keep * n), round()) used as a slice
    length, and divmod of a counter in a branch."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.keep = 1.0
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        k = max(1, int(self.keep * x.shape[-1]))
        self.keep = round(self.keep - 0.3, 2)
        q, r = divmod(self.calls, 2)
        h = self.fc(x)[..., :k]
        return (h * (q + 1) if r else h - q), k


class FloatListItemsUpdated(nn.Module):
    """Per-task loss weights in a list updated in place every call (uncertainty-style)."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 1)
        self.b = nn.Linear(8, 1)
        self.w = [1.0, 0.5]

    def forward(self, x):
        la, lb = self.a(x).pow(2).mean(), self.b(x).abs().mean()
        self.w[0] *= 0.9
        self.w[1] = min(1.0, self.w[1] + 0.2)
        return la * self.w[0] + lb * self.w[1]


case("float_to_tensor_factories", V8)(lambda: FloatToTensorFactories())
case("noam_schedule_in_forward", V8)(lambda: NoamScheduleInForward())
case("int_from_float_slice_length", V8)(lambda: IntFromFloatSliceLength())
case("float_list_items_updated", V8)(lambda: FloatListItemsUpdated())


# ----------------------------------------------------------------------------- functional-style helpers over modules
class ReduceMapChain(nn.Module):
    """functools.reduce(torch.add, ...), map(torch.sigmoid, ...), itertools.chain over two
    parameter lists, max(modules, key=...), any(isinstance(...) for m in self.modules())."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6))
        self.c = nn.Linear(8, 4)

    def forward(self, x):
        outs = [self.a(x), F.pad(self.b(x), (0, 2)), F.pad(self.c(x), (0, 4))]
        total = functools.reduce(torch.add, map(torch.sigmoid, outs))
        norm = sum(p.norm() for p in itertools.chain(self.a.parameters(), self.c.parameters()))
        widest = max((self.a, self.c), key=lambda m: m.out_features)
        has_bn = any(isinstance(m, nn.BatchNorm1d) for m in self.modules())
        return total * norm + widest(x).sum(-1, keepdim=True), has_bn


class ProductShiftsRoll(nn.Module):
    """itertools.product over shift pairs with torch.roll (Swin-style shifted windows)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        h = self.conv(x)
        acc = [torch.roll(h, shifts=(dy, dx), dims=(2, 3)) for dy, dx in itertools.product((-1, 1), repeat=2)]
        return torch.cat([*acc, h], 1)


class ZipStarTranspose(nn.Module):
    """list(zip(*pairs)) to transpose (mean, logvar) pairs from heads, dict merges with **."""
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(8, 4) for _ in range(3))
        self.base = {"beta": 0.5}

    def forward(self, x):
        pairs = [h(x).chunk(2, -1) for h in self.heads]
        means, logvars = (torch.stack(t) for t in zip(*pairs))
        cfg = {**self.base, "gamma": 2.0}
        opts = dict(**cfg, delta=1.0)
        kl = -0.5 * (1 + logvars - means ** 2 - logvars.exp()).sum(-1).mean()
        return means.sum(0) * opts["gamma"] + kl * opts["beta"], sorted(opts)


class ModuleListSlicesAlternate(nn.Module):
    """ModuleList sliced (layers[1:], layers[::2]), enumerate(start=1) alternating blocks,
    range(len(...)) indexing, ModuleDict of ModuleLists indexed by name then position."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        self.stages = nn.ModuleDict({"s1": nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])})

    def forward(self, x):
        x = self.layers[0](x)
        for i, layer in enumerate(self.layers[1:], start=1):
            x = torch.tanh(layer(x)) if i % 2 else x + layer(x)
        y = sum(m(x) for m in self.layers[::2])
        for i in range(len(self.stages["s1"])):
            y = self.stages["s1"][i](y)
        return y


class MetricsItemLogging(nn.Module):
    """Lightning-style metrics: loss.item() stored in a dict attribute under no_grad."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
        self.metrics = {}

    def forward(self, x, y):
        logits = self.fc(x)
        loss = F.cross_entropy(logits, y)
        with torch.no_grad():
            self.metrics["loss"] = loss.item()
            self.metrics["acc"] = (logits.argmax(-1) == y).float().mean().item()
        return loss


def _xy3():
    return R(6, 8), torch.randint(0, 3, (6,))


case("reduce_map_chain_any_max", V8)(lambda: ReduceMapChain())
case("product_shifts_roll", lambda: (R(1, 3, 5, 5),))(lambda: ProductShiftsRoll())
case("zip_star_transpose_dict_merge", V8)(lambda: ZipStarTranspose())
case("modulelist_slices_alternate", V8)(lambda: ModuleListSlicesAlternate())
case("metrics_item_logging_no_grad", _xy3)(lambda: MetricsItemLogging())


# ----------------------------------------------------------------------------- optimizers inside forward
class TentAdaptation(nn.Module):
    """TENT test-time adaptation: entropy loss, backward, SGD step on the norm's affine
    parameters and zero_grad, all inside forward."""
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 3))
        self.opt = torch.optim.SGD(self.model[1].parameters(), lr=0.1, momentum=0.9)

    def forward(self, x):
        out = self.model(x)
        loss = -(out.softmax(1) * out.log_softmax(1)).sum(1).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return out


class WholeTrainStepAdam(nn.Module):
    """A whole training step wrapped in forward with Adam (zero_grad, backward, step)."""
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=0.01)

    def forward(self, x):
        self.opt.zero_grad()
        loss = self.net(x).square().mean()
        loss.backward()
        self.opt.step()
        return loss.detach()


case("tent_test_time_adaptation_sgd", V8)(lambda: TentAdaptation())
case("whole_train_step_adam", V8)(lambda: WholeTrainStepAdam())


# ----------------------------------------------------------------------------- mixed precision regions
class AutocastRegionsBlock(nn.Module):
    """A bf16 autocast region around the projections, a nested disabled region computing the
    softmax in float32, results used outside in float32 (AMP inference code)."""
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(8, 16)
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q, k = self.qk(x).chunk(2, -1)
            with torch.autocast("cpu", enabled=False):
                a = (q.float() @ k.float().transpose(1, 2) / math.sqrt(8)).softmax(-1)
            h = self.out(a @ x)
        return h.float() + x


case("autocast_bf16_region_nested_disabled", SEQ)(lambda: AutocastRegionsBlock())


# ----------------------------------------------------------------------------- tensor queues
class MoCoQueue(nn.Module):
    """MoCo's key queue: a buffer written in place at a pointer kept in a long buffer read with
    int(), the pointer advanced modulo the queue length; logits against the whole queue."""
    def __init__(self, dim=8, k=12):
        super().__init__()
        self.enc = nn.Linear(8, dim)
        self.k = k
        self.register_buffer("queue", F.normalize(torch.randn(dim, k), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _enqueue(self, keys):
        bs = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr:ptr + bs] = keys.T
        self.queue_ptr[0] = (ptr + bs) % self.k

    def forward(self, x):
        q = F.normalize(self.enc(x), dim=1)
        k = F.normalize(self.enc(x.flip(0)), dim=1).detach()
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ self.queue.clone().detach()], 1) / 0.07
        self._enqueue(k)
        return logits


class RingBufferIntAttr(nn.Module):
    """The same ring buffer with the pointer as a Python int attribute (no break)."""
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8)
        self.register_buffer("bank", torch.zeros(12, 8))
        self.ptr = 0

    def forward(self, x):
        h = self.enc(x)
        n = x.shape[0]
        self.bank[self.ptr:self.ptr + n] = h.detach()
        self.ptr = (self.ptr + n) % 12
        return h @ self.bank.t()


case("moco_queue_pointer_buffer", V8)(lambda: MoCoQueue())
case("ring_buffer_int_pointer_attr", V8)(lambda: RingBufferIntAttr())


CASES = bench.CASES[_FIRST:]


if __name__ == "__main__":
    bench.main(CASES)
