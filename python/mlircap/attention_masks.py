"""Constant attention masks in captured graphs: dropped when they mask nothing,
turned into ``is_causal=True`` when they are the causal mask.

Libraries build masks from constants when they are traced: transformers'
``create_bidirectional_mask`` skips the mask in eager (its padding check reads
data) but, while compiling, builds a [batch, 1, L, S] boolean mask of all True
from ``arange``. Such a mask rules out the flash and cuDNN kernels (they take
no mask), and torch's choice then falls to the memory-efficient kernel or to
the math one, whose decomposition upcasts bfloat16 to float32 (a ViT bf16:
float32 GEMMs for every attention). Eager, which passes no mask, runs cuDNN.

``simplify_attention_masks`` runs on the captured graph, before aot_autograd
decomposes ``scaled_dot_product_attention``. For each SDPA call whose
``attn_mask`` is computed from constants only (no graph input, no parameter or
buffer, no random or uninitialized op), it evaluates the mask once and
* drops it when it masks nothing (boolean all True, or float all zero), and
* replaces it by ``is_causal=True`` when it is exactly the lower-triangular
  causal mask (boolean, or float with 0 and -inf or another fill of at most -1e4,
  such as transformers' finfo(dtype).min) of a square L == S score
  matrix, which is what ``is_causal`` means,
provided the mask does not broadcast the result to a larger shape (checked
against q, k and v's shapes). Both forms compute the same attention: a True
entry (or + 0.0) leaves a score as it is; causal -inf/False entries become 0
after the softmax as the causal kernels' are. Kernels may differ in rounding,
as eager's own choice among them does. MLIRCAP_FUSE_ATTENTION=0 turns this off
too.
"""
from __future__ import annotations

import re

import torch
import torch.fx as fx

from . import logs

_SDPA = {torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention,
         torch.ops.aten.scaled_dot_product_attention.default}
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
# ops whose value is not a function of their arguments (or that read uninitialized memory)
_IMPURE_PREFIXES = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential", "poisson",
                    "cauchy", "geometric", "seed", "manual", "empty")
_IMPURE_WORDS = {"set", "copy", "item", "tolist", "numpy", "data_ptr"}
_MAX_MASK_ELEMENTS = 1 << 26
# Fill values that count as "masked out": exp(fill + s - max) underflows to 0 in
# float32 for any row that has an unmasked entry (and any score spread below 1e4).
MASKED_MAX = -1e4


def _target_name(t) -> str:
    return str(getattr(t, "__name__", None) or t).lower()


def _constant_subgraph(node: fx.Node) -> list[fx.Node] | None:
    """The nodes `node` is computed from, in graph order, when all of them are
    deterministic calls on constants; else None."""
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    seen: set[fx.Node] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op not in ("call_function", "call_method"):
            return None   # a graph input, a parameter or buffer, a submodule
        words = re.split(r"[^a-z0-9]+", _target_name(n.target))
        if any(w.startswith(_IMPURE_PREFIXES) or w in _IMPURE_WORDS for w in words) and \
                not (words[0] == "empty" and _only_shape_read(n)):
            return None
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and \
                torch.Tag.nondeterministic_seeded in n.target.tags:
            return None
        todo.extend(n.all_input_nodes)
    # nothing that reads these values (or views of them) changes a tensor in place
    # (masked_fill_, fill_diagonal_, x[i] = ..., out=): the evaluation would miss it
    todo, reached = list(seen), set(seen)
    while todo:
        n = todo.pop()
        if _mutates(n):
            return None
        if n not in seen and _fresh(n):
            continue   # its result is a new tensor: what reads it cannot reach the mask's
        for u in n.users:
            if u not in reached:
                reached.add(u)
                todo.append(u)
    return sorted(seen, key=order.__getitem__)


def _fresh(n: fx.Node) -> bool:
    """`n`'s result is certainly no view of its arguments."""
    if n.op == "call_function" and n.target in _SDPA:
        return True
    t = n.target
    return isinstance(t, torch._ops.OpOverload) and all(r.alias_info is None for r in t._schema.returns)


_IN_PLACE_OPERATORS = {"setitem", "delitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow",
                       "iand", "ior", "ixor", "ilshift", "irshift", "imatmul", "iconcat"}


def _mutates(n: fx.Node) -> bool:
    """`n` may change one of its arguments in place (conservatively)."""
    if n.op not in ("call_function", "call_method"):
        return False
    if "out" in n.kwargs:
        return True
    if isinstance(n.target, torch._ops.OpOverload):
        return n.target._schema.is_mutable
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    if getattr(n.target, "__module__", None) in ("operator", "_operator"):   # and_, or_: not in place
        return name in _IN_PLACE_OPERATORS
    dunder = re.search(r"__(\w+?)__$", name)
    if dunder:
        return dunder.group(1) in _IN_PLACE_OPERATORS
    return name in _IN_PLACE_OPERATORS or name.endswith("_")


# ops whose value depends on their tensor argument's shape and dtype only (ones and
# zeros decompose into full_like of an empty_strided)
_SHAPE_READERS = {"full_like", "zeros_like", "ones_like", "new_full", "new_zeros", "new_ones"}


def _only_shape_read(n: fx.Node) -> bool:
    """`n` (uninitialized memory) is only read for its shape: its values matter nowhere."""
    return bool(n.users) and all(
        _target_name(u.target).split(".")[0] in _SHAPE_READERS and u.args and u.args[0] is n and
        n not in list(u.args[1:]) + list(u.kwargs.values()) for u in n.users)


def _evaluate(nodes: list[fx.Node]):
    env: dict[fx.Node, object] = {}

    def load(a):
        return fx.node.map_arg(a, env.__getitem__)

    for n in nodes:
        args, kwargs = load(n.args), load(n.kwargs)
        if n.op == "call_function":
            env[n] = n.target(*args, **kwargs)
        else:
            env[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
    return env[nodes[-1]]


def _sdpa_args(n: fx.Node) -> dict:
    out = dict(zip(_SDPA_ARGS, n.args))
    out.update(n.kwargs)
    return out


def _set_args(n: fx.Node, **changes) -> None:
    args = list(n.args)
    kwargs = dict(n.kwargs)
    for k, v in changes.items():
        i = _SDPA_ARGS.index(k)
        if i < len(args):
            args[i] = v
        else:
            kwargs[k] = v
    n.args, n.kwargs = tuple(args), kwargs


def _kind(mask: torch.Tensor, negate: bool = False, additive: bool = False,
          masked_max: float = MASKED_MAX) -> str | None:
    """"none" (masks nothing), "causal" (the square causal mask), or None. `negate`:
    a boolean mask whose True entries are the masked ones; `additive`: a mask added to
    the scores, so float only. A float mask allows its 0 entries and masks those at
    most `masked_max` (-inf, transformers' finfo.min, -1e4: exp(score + fill - max)
    is 0 for any row with an allowed entry); any other value leaves it as it is."""
    if mask.dim() < 2 or mask.numel() == 0:
        return None
    if mask.dtype == torch.bool and not additive:
        allowed = ~mask if negate else mask
    elif mask.is_floating_point():
        allowed = mask == 0
        if not bool((allowed | (mask <= masked_max)).all()):
            return None
    else:
        return None
    if bool(allowed.all()):
        return "none"
    L, S = allowed.shape[-2:]
    if L == S and L > 1:
        causal = torch.ones(L, S, dtype=torch.bool, device=allowed.device).tril()
        if bool((allowed == causal).all()):
            return "causal"
    return None


def _shapes(gm: fx.GraphModule, example_inputs, nodes: list[fx.Node]) -> dict | None:
    """Shapes of `nodes` (fake-tensor propagation of the graph), or None."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    try:
        mode = detect_fake_mode(example_inputs) or FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            # fresh tensors of the inputs' shapes and strides: the graph may change its
            # inputs in place (metadata included), and aot_autograd traces them next
            ins = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                   if isinstance(x, torch.Tensor) else x for x in example_inputs]
        vals = {}

        class Prop(FakeTensorProp):
            def run_node(self, n):
                r = super().run_node(n)
                if n in nodes:
                    vals[n] = r
                return r

        with torch.no_grad():
            Prop(gm, mode).propagate_dont_convert_inputs(*ins)
        return {n: tuple(v.shape) for n, v in vals.items() if isinstance(v, torch.Tensor)}
    except Exception as e:  # noqa: BLE001 - without shapes nothing is changed
        logs.log("passes", f"attention masks: shapes unknown ({type(e).__name__}: {str(e)[:120]})")
        return None


def constant_mask_kind(mask, negate: bool = False, additive: bool = False,
                       masked_max: float = MASKED_MAX) -> str | None:
    """For attention.fuse_attention (aten graphs after aot_autograd): "none", "causal"
    or None for mask node `mask` (see `_kind`), when it is computed from constants only."""
    found = _classify(mask, negate, additive, masked_max)
    return None if found is None else found[0]


def _evaluate_kind(nodes: list[fx.Node], *how) -> tuple[str, tuple[int, ...]] | None:
    """(kind, shape) of the mask `nodes` compute (`how`: _kind's options), on real
    tensors (also while aot_autograd's fake and proxy modes are active), or None."""
    from torch.utils._python_dispatch import _disable_current_modes

    try:
        with torch.no_grad(), _disable_current_modes():
            value = _evaluate(nodes)
            if not isinstance(value, torch.Tensor) or value.numel() > _MAX_MASK_ELEMENTS:
                return None
            kind = _kind(value, *how)
    except Exception as e:  # noqa: BLE001 - a mask we cannot evaluate stays
        logs.log("passes", f"attention masks: {nodes[-1].name} not evaluated ({type(e).__name__})")
        return None
    return None if kind is None else (kind, tuple(value.shape))


def _classify(mask, *how) -> tuple[str, tuple[int, ...]] | None:
    """(kind, shape) of mask node `mask` when it is computed from constants only, else None."""
    if not isinstance(mask, fx.Node):
        return None
    nodes = _constant_subgraph(mask)
    return None if nodes is None else _evaluate_kind(nodes, *how)


def simplify_attention_masks(gm: fx.GraphModule, example_inputs) -> int:
    """Drops or turns into is_causal the constant masks of `gm`'s SDPA calls (see
    the module docstring). Returns how many calls changed; recompiles `gm` if any."""
    from .attention import enabled

    if not enabled():
        return 0
    found = []   # (sdpa node, mask node, kind, mask shape)
    kinds: dict[fx.Node, tuple | None] = {}   # per mask node (one mask serves every layer)
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _SDPA:
            continue
        a = _sdpa_args(n)
        mask = a.get("attn_mask")
        if not isinstance(mask, fx.Node) or a.get("is_causal", False) is not False:
            continue
        if mask not in kinds:
            kinds[mask] = _classify(mask)
        if kinds[mask] is not None:
            found.append((n, mask, *kinds[mask]))
    if not found:
        return 0
    qkv = [x for n, *_ in found for x in (_sdpa_args(n)[k] for k in ("query", "key", "value"))
           if isinstance(x, fx.Node)]
    shapes = _shapes(gm, example_inputs, set(qkv))
    if shapes is None:
        return 0
    changed = 0
    for n, mask, kind, mshape in found:
        a = _sdpa_args(n)
        q, k, v = (a[x] for x in ("query", "key", "value"))
        if not all(isinstance(x, fx.Node) and x in shapes for x in (q, k, v)):
            continue
        qs, ks = shapes[q], shapes[k]
        scores = (*qs[:-1], ks[-2])
        try:
            if tuple(torch.broadcast_shapes(scores, mshape)) != tuple(scores):
                continue   # the mask broadcasts the result up: keep it
        except RuntimeError:
            continue
        if kind == "causal" and qs[-2] != ks[-2]:
            continue
        _set_args(n, attn_mask=None, **({"is_causal": True} if kind == "causal" else {}))
        changed += 1
        logs.log("passes", f"attention masks: {n.name}'s constant mask {mshape} "
                           f"{'masks nothing: dropped' if kind == 'none' else 'is causal: is_causal=True'}")
    if changed:
        # the mask's own nodes, now unused (only those: a global dead-code pass could
        # drop in-place method calls whose result nobody reads)
        dead, erased = [m for _, m, *_ in found], set()
        while dead:
            z = dead.pop()
            # (a node reached twice, e.g. one expand feeding two masks, is erased once)
            if isinstance(z, fx.Node) and z not in erased and z.graph is gm.graph and not z.users and \
                    z.op in ("call_function", "call_method"):
                inputs = z.all_input_nodes
                gm.graph.erase_node(z)
                erased.add(z)
                dead.extend(inputs)
        gm.recompile()
    return changed

