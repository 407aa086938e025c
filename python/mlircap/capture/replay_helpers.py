"""What the generated replay code (replay._GraphVariant) calls or is written from: objects
the call made rebuilt (_mk_obj), the statements of replayed writes (_WRITE_FORMS), a graph's
outputs made in the other inference mode (mode_copies), and what a replay that misses does:
the tensors, gradients and RNG state it wrote put back (_rollback, _save_grads), the results
of the uncapturable calls it ran handed on (_merge_log)."""
from __future__ import annotations

import collections

import torch

from .rng import RngStates, _set_rng_states


def _mk_obj(cls: type, d: dict, base: type | None = None, items: list | None = None) -> object:
    """Rebuild an object created during the captured call (fresh object per replay)."""
    o = cls.__new__(cls)
    if base is dict or base is collections.OrderedDict:
        base.__init__(o)
        for k, x in items:
            base.__setitem__(o, k, x)
    elif base is list:
        list.extend(o, items)
    o.__dict__.update(d)
    return o


# Replayed writes other than item/delitem: kind -> statement ({t} target, {k} attribute, {w} value).
_WRITE_FORMS = {
    "set": "{t}.{k} = {w}",
    "extend": "{t}.extend({w})",
    "slice": "{t}[:] = {w}",
    "cvset": "{t}.set({w})",
    "update": "{t}.update({w})",
    "discard": "{t}.difference_update({w})",
    "restride": "{t}.as_strided_(*{w})",   # (restrides.py)
    "restride_kept": "_v = {t}._version; {t}.as_strided_(*{w}); torch._C._autograd._unsafe_set_version_counter(({t},), (_v,))",
}

def mode_copies(inference: bool, *ts: torch.Tensor) -> list[torch.Tensor]:
    """Tensors of the inference mode `inference` (inference tensors, or normal ones) holding the
    values of ts: a graph's outputs that eager made inside a block of that mode
    (graph_steps._merge_inference), with their shapes and strides; those that share memory share
    the copy's (one view of another stays one), those of that mode already are left as they are
    (a view of an argument of that mode stays its view)."""
    out: list[torch.Tensor] = []
    with torch.inference_mode(inference):
        groups: dict = collections.defaultdict(list)
        for t in ts:
            if t.is_inference() == inference:
                continue
            groups[(t.device, t.untyped_storage().data_ptr())].append(t)
        copies: dict[int, torch.Tensor] = {}
        for g in groups.values():
            if len(g) == 1 and g[0].is_contiguous():
                t = g[0]
                copies[id(t)] = t.clone(memory_format=torch.contiguous_format)
                continue
            st = g[0].untyped_storage().clone()
            for t in g:
                copies[id(t)] = torch.empty((0,), dtype=t.dtype, device=t.device).set_(
                    st, t.storage_offset(), t.shape, t.stride())
        out = [copies.get(id(t), t) for t in ts]
    return out


def _merge_log(log: list | None, done: list) -> list:
    """The uncapturable-call results known after a failed replay: those it ran (or took
    from `log`), then any further ones an earlier variant had already run."""
    return done + log[len(done):] if log and len(log) > len(done) else done


def _rollback(saved: list, rng: RngStates | None, grads: list | None = None) -> None:
    with torch.no_grad():
        for t, c in saved:
            t.copy_(c)
        for t, g, c in grads or ():   # (_save_grads)
            t.grad = g
            if g is not None:
                g.copy_(c)
    if rng is not None:
        _set_rng_states(rng)


def _save_grads(leaves: tuple) -> list:
    """The .grad of each leaf (the tensor, its values) as a replay starts: a backward in the
    function accumulates into them, and a replay that misses after it records the call
    again from its start, which runs the backward again (and what came before it, a
    zero_grad): the gradients are restored first, as the other tensors it wrote are."""
    return [(t, t.grad, None if t.grad is None else t.grad.detach().clone()) for t in leaves]
