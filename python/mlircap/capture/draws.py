"""Which torch calls draw from torch's generators: by exact name (`_draws_rng`: aten's ops tagged
nondeterministic_seeded and the Python functions over them), a graph node by its target or by the
mark a recording that saw its call draw left on it (`_node_draws`), and what changes when a call
draws (`_rng_token`).  A graph that draws is replayed with the RNG state rolled back on a miss, and
calls made before it (a module's constructor) are not moved past its draws."""
from __future__ import annotations

from typing import Any

import torch

from .classify import _META_OK, _fname

# torch functions and methods that draw from torch's generators, by exact name: aten's ops tagged
# nondeterministic_seeded (`_draws_rng`), and the Python functions and methods over them that the
# recorder sees as one call.  (A substring match took `F.normalize`, `Tensor.__rand__` (`True & t`),
# `set_flush_denormal` and `native_dropout_backward` for draws, and `F.gumbel_softmax` for none.)
_RNG_NAMES = frozenset({
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "random", "random_",
    "normal", "normal_", "uniform", "uniform_", "bernoulli", "bernoulli_", "multinomial", "poisson", "binomial",
    "exponential", "exponential_", "cauchy", "cauchy_", "geometric", "geometric_", "log_normal", "log_normal_",
    "_standard_gamma", "_sample_dirichlet",
    "dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "alpha_dropout_",
    "feature_dropout", "feature_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_", "native_dropout",
    "_fused_dropout", "rrelu", "rrelu_", "rrelu_with_noise", "rrelu_with_noise_", "gumbel_softmax",
    "fractional_max_pool2d", "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d_with_indices",
    # torch.nn.init's initializers (their `_no_grad_*` helpers included)
    "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
    "sparse_", "_no_grad_uniform_", "_no_grad_normal_", "_no_grad_trunc_normal_"})
_RNG_ATEN: dict[str, bool] = {}


def _draws_rng(name: str) -> bool:
    """The torch function or method called `name` draws from torch's generators: one of
    `_RNG_NAMES`, or an aten op of that name with an overload tagged nondeterministic_seeded
    (cached per name).  Which calls drew at a recording is also seen from the generators'
    state (`_rng_token`, at graph.py's
    calls): this names the draws of graph nodes and steps."""
    r = _RNG_ATEN.get(name)
    if r is None:
        r = name in _RNG_NAMES
        if not r and not name.startswith("__"):
            p = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
            try:
                r = isinstance(p, torch._ops.OpOverloadPacket) and any(
                    torch.Tag.nondeterministic_seeded in getattr(p, o).tags for o in p.overloads())
            except Exception:
                r = False
        _RNG_ATEN[name] = r
    return r


# calls named by `_draws_rng` that draw only in training and with a probability above 0: where the
# probability is (position, keyword, default) and the training flag (position, keywords, default), None
# where there is none (aten tags scaled_dot_product_attention nondeterministic_seeded for its dropout)
_F_DROPOUT = (1, "p", 0.5, 2, ("training", "train"), True)
_DRAWS_WHEN = {**dict.fromkeys(("dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                                "alpha_dropout_", "feature_dropout", "feature_dropout_", "feature_alpha_dropout",
                                "feature_alpha_dropout_"), _F_DROPOUT),
               "scaled_dot_product_attention": (4, "dropout_p", 0.0, None, (), True),
               "rrelu": (None, "", None, 3, ("training",), False), "rrelu_": (None, "", None, 3, ("training",), False)}


def _arg(n: Any, at: int | None, kws: tuple, default: Any) -> Any:
    for k in kws:
        if k in n.kwargs:
            return n.kwargs[k]
    return n.args[at] if at is not None and len(n.args) > at else default


def _node_draws(n: Any) -> bool:
    """The FX node `n` draws from torch's generators (by its target's name, or marked so by the
    recording that saw its call draw: `_RNG_META`).  A dropout whose probability is a constant 0
    or whose training flag is a constant False does not, nor an attention call whose dropout_p
    is 0 (inference: every transformers model in eval): as draws, they kept a module the call
    makes after them (transformers' `ACT2FN[name](x)` in Falcon-H1's conv) from running before
    the open graph, which it then split (bench/heldout12.py falcon_h1_mamba2)."""
    if n.op not in ("call_function", "call_method"):
        return False
    if n.meta.get(_RNG_META):
        return True
    name = n.target if isinstance(n.target, str) else _fname(n.target)
    if not _draws_rng(name):
        return False
    when = _DRAWS_WHEN.get(name)
    if when is None:
        return True
    p_at, p_kw, p_default, train_at, train_kws, train_default = when
    p = _arg(n, p_at, (p_kw,), p_default) if p_at is not None else None
    training = _arg(n, train_at, train_kws, train_default) if train_at is not None else True
    return not ((type(p) in (int, float) and p == 0) or training is False)


_RNG_META = "mlircap_draws_rng"


def _may_draw(func: Any, name: str) -> bool:
    """Whether a call of `func` (named `name`) is worth watching for draws (`_rng_token`, ~10 us
    a call under the recorder's mode): not Python's operators on tensors (`__add__`,
    `__getitem__`), attribute reads and writes (`t.shape`, `t.grad = g`), metadata queries
    (`_META_OK`), none of which draws; and not the calls `_draws_rng` names already."""
    return not (name.startswith("__") or name in _META_OK or
                getattr(func, "__name__", None) in ("__get__", "__set__") or _draws_rng(name))


def _rng_token() -> tuple:
    """What changes when a call draws from torch's default generators: the CPU generator's
    state, and each CUDA generator's offset once CUDA is in use."""
    cpu = torch.default_generator.get_state().numpy().tobytes()
    if not torch.cuda.is_initialized():
        return (cpu,)
    try:
        return (cpu, tuple(g.get_offset() for g in torch.cuda.default_generators))
    except RuntimeError:   # (a generator that cannot say: its draws are named by `_draws_rng` alone)
        return (cpu,)
