"""Fifth capture corpus (issue 11, item 4): Python idioms of real model code that capture.py ..
modules7.py use little or not at all, each in a small module written the way public repositories
write it: dataclass configs (frozen, default_factory, replace, asdict), Enum / IntEnum / str-Enum
driven branches and Enum keys, functools.partial / lambdas / operator functions stored on
modules, registries of layer classes in dicts (decorator registration, class lookup by name),
**kwargs forwarding through wrapper layers, super() chains through mixins, generators / `yield
from` / generator expressions in helper code, try/except around optional features, f-string keys of
nn.ModuleDict / ParameterDict, typing.NamedTuple and dataclass outputs, recursion over nested
dicts / lists / tuples of tensors, contextmanager helpers toggling module flags, singledispatch,
lru_cache'd shape helpers, match statements, itertools (chain, accumulate, pairwise, islice, zip
of ModuleLists), functools.reduce, __getattr__ forwarding, classmethod constructors.

    PYTHONPATH=python python bench/capture_all.py --no-dynamo --jobs 1 --corpus capture5

Cases are registered as modules5-7.py's are (corpus_cases.registrars): (name, factory,
inputs, train, extra); inputs may take the call index."""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import itertools
import math
import operator
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import R, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ========================================================================= dataclass configs
@dataclasses.dataclass(frozen=True)
class BlockConfig:
    dim: int = 8
    hidden_mult: float = 2.0
    act: str = "gelu"
    dropout: float = 0.0
    norm_first: bool = True
    layer_scale: Optional[float] = 0.5
    extra: dict = dataclasses.field(default_factory=lambda: {"eps": 1e-5})

    @property
    def hidden(self):
        return int(self.dim * self.hidden_mult)


class ConfigBlock(nn.Module):
    """A transformer-style MLP block configured by a frozen dataclass (property on the config,
    a dict field made by default_factory, Optional layer scale)."""

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        self.cfg = cfg
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.extra["eps"])
        self.fc1, self.fc2 = nn.Linear(cfg.dim, cfg.hidden), nn.Linear(cfg.hidden, cfg.dim)
        self.gamma = nn.Parameter(torch.full((cfg.dim,), cfg.layer_scale)) if cfg.layer_scale else None

    def forward(self, x):
        cfg = self.cfg
        h = self.norm(x) if cfg.norm_first else x
        h = self.fc2(getattr(F, cfg.act)(self.fc1(h)))
        if self.gamma is not None:
            h = h * self.gamma
        out = x + F.dropout(h, cfg.dropout, self.training)
        return out if cfg.norm_first else self.norm(out)


case("dataclass_frozen_config_block", lambda: (R(2, 5, 8),))(lambda: ConfigBlock(BlockConfig()))
case("dataclass_config_replace_post_norm", lambda: (R(2, 5, 8),))(
    lambda: ConfigBlock(dataclasses.replace(BlockConfig(), act="silu", norm_first=False, layer_scale=None)))


class AsdictHead(nn.Module):
    """The config turned into a dict (dataclasses.asdict) and its items iterated to decide the
    head: a per-key loop over a dict built in forward."""

    def __init__(self):
        super().__init__()
        self.cfg = BlockConfig(act="relu")
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        opts = dataclasses.asdict(self.cfg)
        h = self.fc(x)
        for k, v in sorted(opts.items()):
            if k == "act":
                h = getattr(torch, v)(h)
            elif k == "hidden_mult" and v > 1:
                h = h * v
        return h


case("dataclass_asdict_items_loop", lambda: (R(3, 8),))(lambda: AsdictHead())


# ========================================================================= enums
class Pooling(enum.Enum):
    MEAN = "mean"
    MAX = "max"
    CLS = "cls"


class Norm(enum.IntEnum):
    NONE = 0
    LAYER = 1
    RMS = 2


class EnumPooler(nn.Module):
    """Enum-driven branches (`if self.pool is Pooling.MAX`, IntEnum compared with `>=`), an
    Enum-keyed dict of scale factors and the enum's value in a string."""
    SCALE = {Pooling.MEAN: 1.0, Pooling.MAX: 0.5, Pooling.CLS: 2.0}

    def __init__(self, pool: Pooling, norm: Norm):
        super().__init__()
        self.pool, self.norm = pool, norm
        self.proj = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        h = self.proj(x)
        if self.norm == Norm.LAYER:
            h = self.ln(h)
        elif self.norm >= Norm.RMS:
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        if self.pool is Pooling.MAX:
            out = h.max(1).values
        elif self.pool is Pooling.CLS:
            out = h[:, 0]
        else:
            out = h.mean(1)
        return {f"pooled_{self.pool.value}": out * self.SCALE[self.pool], "norm": int(self.norm)}


case("enum_pooling_max_rmsnorm", lambda: (R(2, 5, 8),))(lambda: EnumPooler(Pooling.MAX, Norm.RMS))
case("enum_pooling_cls_layernorm", lambda: (R(2, 5, 8),))(lambda: EnumPooler(Pooling.CLS, Norm.LAYER))


class Mode(str, enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


class StrEnumModeSwitch(nn.Module):
    """A str-Enum mode attribute changed between calls: compared with a plain string and
    with the member, and looked up by value (`Mode(name)`)."""

    def __init__(self):
        super().__init__()
        self.mode = Mode.TRAIN
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        if self.mode == "train":
            h = F.dropout(h, 0.0) + 0.1
        if Mode(self.mode.value) is Mode.EVAL:
            h = h.softmax(-1)
        return h


def _flip_mode(m, i):
    m.mode = Mode.EVAL if i % 2 else Mode.TRAIN


case("str_enum_mode_switched_between_calls", lambda: (R(3, 8),), between=_flip_mode, ncalls=4)(
    lambda: StrEnumModeSwitch())


# ========================================================================= partial / lambdas
class PartialActs(nn.Module):
    """Activations kept on the module as functools.partial / lambda / operator functions, and
    a list of (name, fn) pairs applied in order with functools.reduce."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = functools.partial(F.leaky_relu, negative_slope=0.2)
        self.gate = lambda t: torch.sigmoid(t) * 2
        self.combine = operator.add
        # (a tuple: bench/capture.py's state check compares list attributes, and a deep-copied
        # partial is equal only to itself)
        self.post = (("clip", functools.partial(torch.clamp, min=-1.5, max=1.5)), ("scale", lambda t: t * 0.5))

    def forward(self, x):
        h = self.fc(x)
        h = self.combine(self.act(h), self.gate(h))
        return functools.reduce(lambda acc, nf: nf[1](acc), self.post, h)


case("partial_lambda_operator_on_module", lambda: (R(4, 8),))(lambda: PartialActs())


def _scaled_act(t, fn, scale=1.0):
    return fn(t) * scale


class PartialOfPartial(nn.Module):
    """A partial of a module function made from another partial in __init__, with keywords
    given again at the call (overriding the stored one)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        base = functools.partial(_scaled_act, fn=torch.tanh)
        self.act = functools.partial(base, scale=3.0)

    def forward(self, x):
        h = self.fc(x)
        return self.act(h) + self.act(h, scale=0.5)


case("partial_of_partial_keyword_override", lambda: (R(4, 8),))(lambda: PartialOfPartial())


# ========================================================================= registries
LAYERS = {}


def register(name):
    def deco(cls):
        LAYERS[name] = cls
        return cls
    return deco


@register("mlp")
class MLPLayer(nn.Module):
    def __init__(self, dim, **kwargs):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x, **kwargs):
        return F.gelu(self.fc(x))


@register("conv")
class ConvLayer(nn.Module):
    def __init__(self, dim, kernel_size=3, **kwargs):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim)

    def forward(self, x, **kwargs):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


@register("attn")
class AttnLayer(nn.Module):
    def __init__(self, dim, heads=2, **kwargs):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask=None, **kwargs):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, n, d)


class RegistryStack(nn.Module):
    """Layers built from a spec list through a registry dict of classes (decorator
    registration), their kwargs forwarded; forward passes **kwargs on to every layer and picks
    per-layer residual flags by the class (isinstance)."""

    def __init__(self, spec=("conv", "attn", "mlp")):
        super().__init__()
        self.layers = nn.ModuleList(LAYERS[s](8, heads=2, kernel_size=3) for s in spec)

    def forward(self, x, **kwargs):
        for layer in self.layers:
            y = layer(x, **kwargs)
            x = x + y if not isinstance(layer, ConvLayer) else y
        return x


case("registry_dict_of_layer_classes_kwargs", lambda: (R(2, 5, 8),))(lambda: RegistryStack())


class KwargsCaller(nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = RegistryStack(("attn", "mlp", "attn"))

    def forward(self, x, keep):
        mask = keep[:, None, None, :]
        return self.stack(x, mask=mask, unused_flag=True)


case("registry_stack_mask_kwarg_forwarded", lambda: (R(2, 5, 8), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])))(
    lambda: KwargsCaller())


# ========================================================================= **kwargs wrappers
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, *, scale=1.0, bias=None, return_dict=False, **unused):
        h = self.fc(x) * scale
        if bias is not None:
            h = h + bias
        return {"hidden": h, "extra": unused.get("tag")} if return_dict else h


class Wrapper(nn.Module):
    """Wrapper layers forwarding *args / **kwargs to the wrapped module, adding and removing
    keys on the way (kwargs.pop / setdefault / {**kwargs, ...}) as HF's wrappers do."""

    def __init__(self, inner, name):
        super().__init__()
        self.inner, self.name = inner, name

    def forward(self, *args, **kwargs):
        kwargs.setdefault("scale", 2.0)
        kwargs.pop("debug", None)
        out = self.inner(*args, **{**kwargs, "return_dict": True, "tag": self.name})
        return out["hidden"] if isinstance(out, dict) else out


case("kwargs_forwarding_through_two_wrappers", lambda: (R(3, 8), R(8)))(
    lambda: _Two(Wrapper(Wrapper(Inner(), "a"), "b")))


class _Two(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, x, b):
        return self.w(x, bias=b, debug=True) + self.w(x, scale=0.5)


# ========================================================================= super() / mixins
class InitWeightsMixin:
    def reset(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)


class ScaleMixin:
    def post(self, h):
        return super().post(h) * self.scale


class ClampMixin:
    def post(self, h):
        return super().post(h).clamp(-2, 2)


class BasePost(nn.Module):
    def post(self, h):
        return h + 1


class MixedBlock(InitWeightsMixin, ScaleMixin, ClampMixin, BasePost):
    """A cooperative super() chain through two mixins (each `super().post(h)`) over an
    nn.Module base, the scale a class attribute overridden per instance."""
    scale = 3.0

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.reset()

    def forward(self, x):
        return self.post(self.fc(x))


case("super_chain_through_mixins", lambda: (R(4, 8),))(lambda: MixedBlock())


class BaseEncoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x, **kwargs):
        return self.fc(x)


class GatedEncoder(BaseEncoder):
    def __init__(self, d):
        super(GatedEncoder, self).__init__(d)
        self.gate = nn.Linear(d, d)

    def forward(self, x, **kwargs):
        return super(GatedEncoder, self).forward(x, **kwargs) * torch.sigmoid(self.gate(x))


class ResidualGatedEncoder(GatedEncoder):
    def forward(self, x, **kwargs):
        return x + super().forward(x, **kwargs)


case("super_two_arg_and_zero_arg_forward_chain", lambda: (R(4, 8),))(lambda: ResidualGatedEncoder(8))


# ========================================================================= generators
def _windows(x, size, step):
    """A helper generator: overlapping windows along dim 1."""
    for start in range(0, x.shape[1] - size + 1, step):
        yield start, x[:, start:start + size]


def _pairs(mods):
    yield from zip(mods[:-1], mods[1:])


class GeneratorHelpers(nn.Module):
    """Generators in helper code: a window generator consumed by a for loop, `yield from`
    over zipped ModuleList slices, a generator expression summed, next() with a default."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        pooled = [w.mean(1) * (1 + s) for s, w in _windows(x, 3, 2)]
        h = torch.stack(pooled, 1).sum(1)
        for a, b in _pairs(self.blocks):
            h = h + b(torch.relu(a(h)))
        first_big = next((i for i, p in enumerate(pooled) if p.shape[-1] > 100), -1)
        return h + sum(p.mean() for p in pooled) + first_big


case("generator_helpers_windows_yield_from", lambda: (R(2, 7, 8),))(lambda: GeneratorHelpers())


def _named_leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for k in sorted(tree):
            yield from _named_leaves(tree[k], f"{prefix}{k}.")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _named_leaves(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], tree


@fn_case("recursive_generator_over_nested_tree", lambda: ({"a": R(3), "b": [R(3), (R(3), R(3))], "c": {"d": R(3)}},))
def recursive_generator_over_nested_tree(tree):
    """A recursive generator (`yield from` itself) flattening a nested dict / list / tuple of
    tensors into dotted names, then a dict comprehension over it."""
    flat = dict(_named_leaves(tree))
    return {k: v * (i + 1) for i, (k, v) in enumerate(flat.items())}


class EMAState(nn.Module):
    """A generator kept across calls would not be reproducible; here a generator made and
    fully consumed in each call: itertools.islice of an infinite count, accumulate of scales."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        decays = list(itertools.islice((0.5 ** k for k in itertools.count()), 4))
        cum = list(itertools.accumulate(decays, operator.mul))
        h = self.fc(x)
        return sum(c * h.roll(k, -1) for k, c in enumerate(cum))


case("itertools_islice_count_accumulate", lambda: (R(3, 8),))(lambda: EMAState())


# ========================================================================= try/except optional features
try:
    import flash_attn_not_installed as _fa  # noqa: F401
    HAS_FLASH = True
except ImportError:
    HAS_FLASH = False


class OptionalFeatures(nn.Module):
    """try/except around optional features: an import guarded at module level, getattr with a
    default, an AttributeError for a missing submodule handled in forward, a KeyError from a
    dict of options, and `try: ... finally:` restoring a flag."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.opts = {"causal": True}
        self.busy = False

    def forward(self, x):
        self.busy = True
        try:
            q, k, v = self.qkv(x).chunk(3, -1)
            if HAS_FLASH:
                out = _fa.flash_attn_func(q, k, v)
            else:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=self.opts.get("causal", False))
            try:
                out = self.post_norm(out)
            except AttributeError:
                out = F.layer_norm(out, out.shape[-1:])
            try:
                w = self.opts["window"]
            except KeyError:
                w = None
            if w is not None:
                out = out[:, -w:]
            fused = getattr(torch, "fused_op_that_does_not_exist", None)
            return fused(out) if fused is not None else out * 1.0
        finally:
            self.busy = False


case("try_except_optional_features", lambda: (R(2, 5, 8),))(lambda: OptionalFeatures())


class FallbackOnError(nn.Module):
    """A reshape tried with view first (raises on a non-contiguous input), then a fallback;
    and an int() parse of a config string inside try/except ValueError."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.groups = "two"

    def forward(self, x):
        h = self.fc(x).transpose(0, 1)
        try:
            flat = h.view(-1)
        except RuntimeError:
            flat = h.reshape(-1)
        try:
            g = int(self.groups)
        except ValueError:
            g = 2
        return flat.view(g, -1).sum(0)


case("try_except_view_fallback_and_value_error", lambda: (R(4, 8),))(lambda: FallbackOnError())


# ========================================================================= ModuleDict keys
class MultiTaskHeads(nn.Module):
    """f-string keys of nn.ModuleDict / ParameterDict (`f"head_{task}_{i}"`), task names
    from a tuple, `.items()` of the ModuleDict filtered by a key prefix, `in` tests on it."""

    def __init__(self, tasks=("cls", "reg", "seg")):
        super().__init__()
        self.tasks = tasks
        self.heads = nn.ModuleDict({f"head_{t}_{i}": nn.Linear(8, 2 + i) for i, t in enumerate(tasks)})
        self.temps = nn.ParameterDict({f"t_{t}": nn.Parameter(torch.tensor(1.0 + i)) for i, t in enumerate(tasks)})

    def forward(self, x):
        out = {}
        for i, t in enumerate(self.tasks):
            key = f"head_{t}_{i}"
            if key in self.heads:
                out[t] = self.heads[key](x) / self.temps[f"t_{t}"]
        aux = [m(x).sum(-1) for k, m in self.heads.items() if k.startswith("head_s")]
        out["aux"] = torch.stack(aux, -1) if aux else None
        return out


case("module_dict_fstring_keys_multitask", lambda: (R(4, 8),))(lambda: MultiTaskHeads())


class LayerNamesByIndex(nn.Module):
    """Layers added with add_module under formatted names ("layer{:02d}") and fetched back by
    getattr of the same formatted name in forward."""

    def __init__(self, n=3):
        super().__init__()
        self.n = n
        for i in range(n):
            self.add_module("layer{:02d}".format(i), nn.Linear(8, 8))

    def forward(self, x):
        for i in range(self.n):
            x = x + torch.tanh(getattr(self, "layer%02d" % i)(x))
        return x


case("add_module_formatted_names_getattr", lambda: (R(4, 8),))(lambda: LayerNamesByIndex())


# ========================================================================= NamedTuple / dataclass outputs
class DetOut(NamedTuple):
    boxes: torch.Tensor
    scores: torch.Tensor
    aux: Optional[torch.Tensor] = None

    def area(self):
        return (self.boxes[..., 2] - self.boxes[..., 0]) * (self.boxes[..., 3] - self.boxes[..., 1])


class NamedTupleDetector(nn.Module):
    """typing.NamedTuple outputs with a default field and a method, `_replace` to modify a
    field, `._asdict()` unpacked into a dict, a NamedTuple consumed by a second module."""

    def __init__(self):
        super().__init__()
        self.box = nn.Linear(8, 4)
        self.cls = nn.Linear(8, 3)

    def forward(self, x):
        b = self.box(x)
        out = DetOut(torch.cat([b[..., :2], b[..., :2] + b[..., 2:].exp()], -1), self.cls(x).softmax(-1))
        out = out._replace(aux=out.area())
        d = out._asdict()
        return DetOut(**{**d, "scores": d["scores"] * 2}), out.scores.max(-1).values


case("typing_namedtuple_outputs_replace_asdict", lambda: (R(5, 8),))(lambda: NamedTupleDetector())


@dataclasses.dataclass
class EncoderOutput:
    last_hidden: torch.Tensor
    hidden_states: Optional[tuple] = None
    attentions: list = dataclasses.field(default_factory=list)


class DataclassOutputs(nn.Module):
    """A dataclass output object built in forward, fields appended to, then read by the caller
    module (`out.hidden_states[-2]`) and returned as dataclasses.astuple-free fields."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def encode(self, x):
        out = EncoderOutput(last_hidden=x)
        states = [x]
        for layer in self.layers:
            x = torch.relu(layer(x))
            states.append(x)
            out.attentions.append(x.softmax(-1))
        out.last_hidden, out.hidden_states = x, tuple(states)
        return out

    def forward(self, x):
        enc = self.encode(x)
        return enc.hidden_states[-2] + enc.last_hidden, len(enc.attentions), enc.attentions[0]


case("dataclass_output_fields_appended", lambda: (R(3, 8),))(lambda: DataclassOutputs())


# ========================================================================= recursion over nested containers
def _apply(tree, fn):
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: _apply(v, fn) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_apply(v, fn) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_apply(v, fn) for v in tree)
    return tree


def _tree_sum(tree):
    if isinstance(tree, torch.Tensor):
        return tree.sum()
    if isinstance(tree, dict):
        return sum((_tree_sum(v) for v in tree.values()), torch.zeros(()))
    if isinstance(tree, (list, tuple)):
        return sum((_tree_sum(v) for v in tree), torch.zeros(()))
    return torch.zeros(())


@fn_case("recursive_apply_nested_dict_list_tuple",
         lambda: ({"img": R(2, 3), "seq": [R(4), R(2, 2)], "meta": {"scale": 2, "t": (R(3), "tag")}},))
def recursive_apply_nested_dict_list_tuple(batch):
    """A recursive map over a nested batch (dict / list / tuple / non-tensor leaves, the
    container types rebuilt), then a recursive sum; non-tensor leaves kept as they are."""
    out = _apply(batch, lambda t: t * 2 + 1)
    return out, _tree_sum(out)


class NestedStateUpdate(nn.Module):
    """A nested dict of state tensors (per-layer lists) updated recursively by a method
    calling itself, as a cache tree is in generation code."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def update(self, state, depth=0):
        if isinstance(state, torch.Tensor):
            return self.fc(state) * (0.5 ** depth)
        if isinstance(state, dict):
            return {k: self.update(v, depth + 1) for k, v in state.items()}
        return [self.update(v, depth + 1) for v in state]

    def forward(self, state):
        return self.update(state)


case("recursive_method_nested_state_update", lambda: ({"l0": [R(2, 4), R(2, 4)], "l1": {"k": R(2, 4), "v": [R(4)]}},))(
    lambda: NestedStateUpdate())


# ========================================================================= context managers / dispatch / caches
@contextlib.contextmanager
def _temporarily(module, **attrs):
    old = {k: getattr(module, k) for k in attrs}
    for k, v in attrs.items():
        setattr(module, k, v)
    try:
        yield module
    finally:
        for k, v in old.items():
            setattr(module, k, v)


class ContextToggled(nn.Module):
    """A @contextmanager helper that sets module attributes for a block and restores them
    (`with _temporarily(self.inner, scale=..., use_bias=False):`), used twice per call."""

    def __init__(self):
        super().__init__()
        self.inner = _Scaled()

    def forward(self, x):
        a = self.inner(x)
        with _temporarily(self.inner, scale=0.25, use_bias=False) as m:
            b = m(x)
        with _temporarily(self.inner, scale=4.0):
            c = self.inner(x)
        return a, b, c, self.inner.scale


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale, self.use_bias = 1.0, True

    def forward(self, x):
        h = F.linear(x, self.fc.weight, self.fc.bias if self.use_bias else None)
        return h * self.scale


case("contextmanager_temporarily_sets_attrs", lambda: (R(3, 8),))(lambda: ContextToggled())


@functools.singledispatch
def _to_tensor(x, like):
    raise TypeError(type(x))


@_to_tensor.register
def _(x: float, like):
    return torch.full_like(like, x)


@_to_tensor.register
def _(x: torch.Tensor, like):
    return x.expand_as(like)


@_to_tensor.register(list)
def _(x, like):
    return torch.tensor(x, dtype=like.dtype).expand_as(like)


@fn_case("singledispatch_bias_kinds", lambda: (R(3, 4), R(4)))
def singledispatch_bias_kinds(x, b):
    """functools.singledispatch over the kind of a bias argument (float / tensor / list)."""
    return x + _to_tensor(0.5, x) + _to_tensor(b, x) + _to_tensor([1.0, 2.0, 3.0, 4.0], x)


@functools.lru_cache(maxsize=None)
def _sinusoid(n, d):
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


class LruCachedPositions(nn.Module):
    """Sinusoidal positions from an lru_cache'd helper keyed by (length, dim); the lengths
    change between calls (two new keys, then a cached one)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x + _sinusoid(x.shape[1], x.shape[2]))


case("lru_cache_sinusoid_by_length", lambda i=0: (R(2, 4 + (i % 2), 8),), ncalls=4)(lambda: LruCachedPositions())


class MatchDispatch(nn.Module):
    """A `match` statement on a config string and on a tuple shape pattern (`case (b, n, d)`),
    with a guard clause."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        match self.kind:
            case "relu":
                h = torch.relu(self.fc(x))
            case "gelu" | "silu":
                h = getattr(F, self.kind)(self.fc(x))
            case _:
                h = self.fc(x)
        match tuple(h.shape):
            case (b, n, d) if n > 1:
                return h.mean(1), b * d
            case (b, d):
                return h, b * d
        return h, 0


case("match_statement_kind_and_shape", lambda i=0: (R(2, 3, 8) if i % 2 == 0 else R(2, 8),), ncalls=4)(
    lambda: MatchDispatch("silu"))


class ZipChainPairwise(nn.Module):
    """zip of two ModuleLists, itertools.chain of their parameters' norms, itertools.pairwise
    over a list of widths, and enumerate(reversed(...))."""

    def __init__(self, widths=(8, 6, 4)):
        super().__init__()
        self.widths = widths
        self.down = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.norms = nn.ModuleList(nn.LayerNorm(b) for b in widths[1:])

    def forward(self, x):
        for lin, ln in zip(self.down, self.norms):
            x = ln(F.silu(lin(x)))
        reg = sum(p.pow(2).sum() for p in itertools.chain(self.down.parameters(), self.norms.parameters()))
        for i, w in enumerate(reversed(self.widths)):
            x = x * (1 + 0.01 * i * w)
        return x, reg


case("zip_chain_pairwise_modulelists", lambda: (R(3, 8),))(lambda: ZipChainPairwise())


class Forwarding(nn.Module):
    """__getattr__ forwarding to a wrapped module (as PEFT / DDP wrappers do), read of a
    forwarded attribute and call of a forwarded method; classmethod constructor from a dict."""

    def __init__(self, inner):
        super().__init__()
        self.wrapped = inner

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.wrapped, name)

    @classmethod
    def from_config(cls, cfg):
        return cls(nn.Linear(cfg["in"], cfg["out"]))

    def forward(self, x):
        return F.linear(x, self.weight * 2, self.bias) + self.wrapped(x) + self.out_features


case("getattr_forwarding_wrapper_classmethod", lambda: (R(3, 8),))(lambda: Forwarding.from_config({"in": 8, "out": 5}))


class DefaultDictStats(nn.Module):
    """collections.defaultdict(list) of per-group tensors filled in a loop over a Python list
    of group names, then torch.cat per group in sorted order; a Counter of group sizes."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.groups = ["a", "b", "a", "c", "b", "a"]

    def forward(self, x):
        import collections
        h = self.fc(x)
        by = collections.defaultdict(list)
        for i, g in enumerate(self.groups):
            by[g].append(h[i])
        sizes = collections.Counter(self.groups)
        return {g: torch.stack(by[g]).mean(0) * sizes[g] for g in sorted(by)}


case("defaultdict_counter_grouping", lambda: (R(6, 8),))(lambda: DefaultDictStats())


class StaticHelpers(nn.Module):
    """@staticmethod and @classmethod helpers called through self and through the class, a
    class-level constant tuple indexed by an int attribute, and `type(self).__name__` in a key."""
    EPS = (1e-5, 1e-3)

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.eps_idx = 1

    @staticmethod
    def _norm(t, eps):
        return t / (t.norm(dim=-1, keepdim=True) + eps)

    @classmethod
    def _scale(cls, t):
        return t * len(cls.EPS)

    def forward(self, x):
        h = self._norm(self.fc(x), self.EPS[self.eps_idx])
        return {f"{type(self).__name__.lower()}_out": StaticHelpers._scale(h)}


case("staticmethod_classmethod_helpers", lambda: (R(3, 8),))(lambda: StaticHelpers())


class WalrusAnyAll(nn.Module):
    """Walrus assignments in comprehensions and conditions, any()/all() of Python bools about
    shapes, map/filter over a list of tensors, sorted with a key over tensor shapes."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, xs):
        hs = list(map(self.fc, xs))
        if all(h.dim() == 2 for h in hs) and not any(h.shape[0] == 0 for h in hs):
            hs = sorted(hs, key=lambda h: h.shape[0])
        big = [y for h in hs if (y := h.relu()).shape[0] > 2]
        keep = list(filter(lambda h: h.shape[0] % 2 == 1, hs))
        return torch.cat(big + keep, 0)


case("walrus_any_all_map_filter_sorted", lambda: ([R(4, 8), R(3, 8), R(1, 8)],))(lambda: WalrusAnyAll())


class OrderedSlotsConfig:
    __slots__ = ("depth", "width")

    def __init__(self, depth, width):
        self.depth, self.width = depth, width


class SlotsConfigNet(nn.Module):
    """A __slots__ config object whose depth is changed between calls (new recording: the
    loop over range(depth) runs a different number of layers)."""

    def __init__(self):
        super().__init__()
        self.cfg = OrderedSlotsConfig(2, 8)
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        for i in range(self.cfg.depth):
            x = x + self.layers[i](x)
        return x


def _deepen(m, i):
    m.cfg.depth = 2 + (i % 2)


case("slots_config_depth_changed_between_calls", lambda: (R(3, 8),), between=_deepen, ncalls=4)(
    lambda: SlotsConfigNet())


# ========================================================================= harder: state across calls, decorators, parsing
def _logged(fn):
    """A functools.wraps decorator counting calls in a closure cell (`nonlocal`, shared by every
    instance) and per instance on the module (`self.ncalls`), as logging / timing decorators do."""
    calls = 0

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        nonlocal calls
        calls += 1
        self.ncalls = getattr(self, "ncalls", 0) + 1
        return fn(self, *args, **kwargs)
    return wrapper


class DecoratedForward(nn.Module):
    """forward wrapped by a functools.wraps decorator holding a nonlocal counter; a helper
    decorated with torch.no_grad() computing a detached statistic."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @torch.no_grad()
    def _stat(self, h):
        return h.abs().mean(0)

    @_logged
    def forward(self, x):
        h = self.fc(x)
        return h * self._stat(h), self.ncalls


case("wraps_decorator_nonlocal_counter_no_grad_helper", lambda: (R(3, 8),), ncalls=4)(lambda: DecoratedForward())


class HistoryDeque(nn.Module):
    """collections.deque(maxlen=3) of detached past outputs kept on the module across calls,
    averaged into the output (a history buffer of a smoothing / EMA-like head)."""

    def __init__(self):
        super().__init__()
        import collections
        self.fc = nn.Linear(8, 8)
        self.hist = collections.deque(maxlen=3)

    def forward(self, x):
        h = self.fc(x)
        self.hist.append(h.detach())
        return h + torch.stack(list(self.hist)).mean(0)


case("deque_maxlen_history_across_calls", lambda: (R(3, 8),), ncalls=5)(lambda: HistoryDeque())


class EinopsLikePattern(nn.Module):
    """An einops-style pattern string parsed in forward (str.split / strip / index / zip) to
    decide a permutation and a reshape, as small einops clones do."""

    def __init__(self, pattern="b c h w -> b (h w) c"):
        super().__init__()
        self.pattern = pattern
        self.proj = nn.Linear(3, 3)

    def forward(self, x):
        lhs, rhs = (s.strip() for s in self.pattern.split("->"))
        names = lhs.split()
        groups, cur = [], None
        for tok in rhs.replace("(", " ( ").replace(")", " ) ").split():
            if tok == "(":
                cur = []
            elif tok == ")":
                groups.append(tuple(cur))
                cur = None
            elif cur is not None:
                cur.append(tok)
            else:
                groups.append((tok,))
        order = [names.index(n) for g in groups for n in g]
        sizes = dict(zip(names, x.shape))
        y = x.permute(*order).reshape(*(math.prod(sizes[n] for n in g) for g in groups))
        return self.proj(y)


case("einops_like_pattern_parsed_in_forward", lambda: (R(2, 3, 4, 5),))(lambda: EinopsLikePattern())


class SignatureFilteredKwargs(nn.Module):
    """HF-style kwargs filtering: inspect.signature of the submodule's forward decides which
    of the given kwargs are passed on."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x, **kwargs):
        import inspect
        accepted = inspect.signature(self.inner.forward).parameters
        kw = {k: v for k, v in kwargs.items() if k in accepted}
        return self.inner(x, **kw)


case("inspect_signature_filters_kwargs", lambda: (R(3, 8), R(8)))(lambda: _Kw(SignatureFilteredKwargs()))


class _Kw(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, b):
        return self.m(x, bias=b, scale=0.5, output_attentions=False)


class BisectSchedule(nn.Module):
    """A step counter on the module and a piecewise schedule by bisect over milestone lists,
    a Python float scaling the output (new value every call)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.step = 0
        self.milestones, self.values = [1, 3], [1.0, 0.5, 0.1]

    def forward(self, x):
        import bisect
        self.step += 1
        lr = self.values[bisect.bisect_right(self.milestones, self.step)]
        return self.fc(x) * lr


case("bisect_milestone_schedule_step_counter", lambda: (R(3, 8),), ncalls=5)(lambda: BisectSchedule())


class SimpleNamespaceCfg(nn.Module):
    """A types.SimpleNamespace config read with getattr defaults and vars(), one field flipped
    between calls."""

    def __init__(self):
        super().__init__()
        import types
        self.cfg = types.SimpleNamespace(act="relu", scale=2.0)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = getattr(torch, self.cfg.act)(self.fc(x))
        if getattr(self.cfg, "residual", False):
            h = h + x
        return h * vars(self.cfg)["scale"]


def _toggle_residual(m, i):
    m.cfg.residual = bool(i % 2)


case("simplenamespace_config_field_added", lambda: (R(3, 8),), between=_toggle_residual, ncalls=4)(
    lambda: SimpleNamespaceCfg())


class GeneratorStoredAcrossCalls(nn.Module):
    """A warmup schedule kept as a generator on the module, made on the first call and
    advanced with next() every call (StopIteration caught: the schedule then holds at its
    last value)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.sched = None
        self.last = 0.0

    def forward(self, x):
        if self.sched is None:
            self.sched = (min(1.0, (k + 1) / 3) for k in range(3))
        try:
            self.last = next(self.sched)
        except StopIteration:
            pass
        return self.fc(x) * self.last


case("generator_schedule_on_module_next_each_call", lambda: (R(3, 8),), ncalls=5)(lambda: GeneratorStoredAcrossCalls())


class IteratorOverDataOnModule(nn.Module):
    """An iterator over a list of precomputed per-call scale tensors held on the module,
    next() each call (itertools.cycle)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scales = itertools.cycle([torch.tensor(0.5), torch.tensor(2.0), torch.tensor(1.0)])

    def forward(self, x):
        return self.fc(x) * next(self.scales)


case("itertools_cycle_of_tensors_on_module", lambda: (R(3, 8),), ncalls=5)(lambda: IteratorOverDataOnModule())


class GlobalCounterAndEnviron(nn.Module):
    """A module-level dict counter written by forward (`global`-style registry of call
    counts) and an os.environ flag read with a default."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        import os
        _CALLS[type(self).__name__] = _CALLS.get(type(self).__name__, 0) + 1
        h = self.fc(x)
        if os.environ.get("CAPTURE5_DEBUG_SCALE", "0") == "1":
            h = h * 10
        return h


_CALLS = {}
case("module_level_counter_dict_and_environ_flag", lambda: (R(3, 8),))(lambda: GlobalCounterAndEnviron())


class ProductGridAnchors(nn.Module):
    """Anchors from itertools.product over Python lists of scales and ratios (math.sqrt),
    made into a tensor in forward and combined with the feature map size."""

    def __init__(self):
        super().__init__()
        self.scales, self.ratios = [8, 16], [0.5, 1.0, 2.0]
        self.conv = nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x):
        f = self.conv(x)
        base = torch.tensor([[-s * math.sqrt(r) / 2, -s / math.sqrt(r) / 2, s * math.sqrt(r) / 2, s / math.sqrt(r) / 2]
                             for s, r in itertools.product(self.scales, self.ratios)])
        h, w = f.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
        shifts = torch.stack([xs, ys, xs, ys], -1).reshape(-1, 1, 4)
        return f, (shifts + base).reshape(-1, 4)


case("itertools_product_anchor_grid", lambda i=0: (R(1, 3, 4 + i, 5),))(lambda: ProductGridAnchors())


class AbstractHeadBase(nn.Module):
    import abc as _abc

    @_abc.abstractmethod
    def logits(self, h):
        ...

    def forward(self, x):
        return self.logits(self.body(x)).log_softmax(-1)


class ConcreteHead(AbstractHeadBase):
    """An abstract base (abc.abstractmethod on an nn.Module subclass) whose forward calls the
    subclass's implementation; a property computing a derived tensor."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(4, 8))

    @property
    def weight_normed(self):
        return F.normalize(self.w, dim=-1)

    def logits(self, h):
        return F.linear(F.normalize(h, dim=-1), self.weight_normed) * 10


case("abstract_base_property_weight", lambda: (R(3, 8),))(lambda: ConcreteHead())


class ZipStarTranspose(nn.Module):
    """zip(*pairs) transposing a list of (mean, logvar) tuples from several heads, divmod of
    a shape, int.bit_length of a size, and a dict update merging outputs."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(8, 4) for _ in range(3))

    def forward(self, x):
        pairs = [tuple(h(x).chunk(2, -1)) for h in self.heads]
        mus, lvs = zip(*pairs)
        q, r = divmod(x.shape[-1], 3)
        out = {"mu": torch.stack(mus).mean(0)}
        out.update(lv=torch.stack(lvs).mean(0) * q + r, bits=x.shape[0].bit_length())
        return out


case("zip_star_divmod_bit_length_dict_update", lambda: (R(5, 8),))(lambda: ZipStarTranspose())


class LoggedStats(nn.Module):
    """Activation statistics formatted into log messages of a logger below its level
    (`log.debug(f"... {h.mean():.3f}")`, evaluated eagerly, then dropped) and a formatted
    summary string returned next to the output, as training code reports values."""

    def __init__(self):
        super().__init__()
        import logging
        self.log = logging.getLogger("capture5.logged_stats")
        self.log.setLevel(logging.WARNING)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        self.log.debug(f"activation mean {h.mean():.3f} std {h.std():.3f}")
        summary = f"max={h.max():.2f}"
        return torch.relu(h), summary


case("disabled_logger_fstring_of_tensor_values", lambda: (R(3, 8),), ncalls=4)(lambda: LoggedStats())
