"""Floats handed to untraced torch functions and custom autograd.Functions as graph inputs
(`_NumberCallMixin`, for `_GraphMixin`): `F.gumbel_softmax(x, tau=tau)` with an annealed tau,
`GradReverse.apply(h, alpha)` with a scheduled alpha, where the call gives the same results with
a 0-d float64 tensor in the float's place (checked on copies at the recording).  Held by the graph
as a constant, such a float was guarded by value (a recompile per step), or the call a step
between graphs once its value changed (scalar_inputs._flow_torch_step)."""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from .draws import _rng_token
from .scalar_inputs import _same_result, _scalar_tensor
from .typeinfo import _np_float


class _NumberCallMixin:
    """For `_GraphMixin` (the recorder's `_number_input`, scalar_inputs.py)."""
    _number_input: Callable[..., None]

    def _number_tensor_call(self, func: Callable, args: tuple, kwargs: dict, exprs: dict) -> tuple | None:
        """`F.gumbel_softmax(x, tau=tau)`: an untraced torch function taking floats flows.py
        follows (ids in `exprs`) among its top-level arguments, on CPU float32 / float64 tensors, held by the graph with each such float
        a 0-d float64 graph input made from its replay expression, where the call gives the
        same result with it: what torch's arithmetic makes of a Python float on the CPU (a
        wrapped 0-d float64 tensor) and the only use the traced graph can make of a tensor
        input (a branch or a Python number read from it cannot be traced: that op then runs
        through torch at its call, backend.split_data_dependent, with the replay's value).
        The call runs first on copies of its tensors with the 0-d inputs, then as written
        from the same RNG state: same results and draws, and no writes to its tensors (where
        the op would run through torch, its writes to the graph's inputs are not assumed to
        reach them: F.batch_norm's running statistics), else the numbers stay guarded
        constants, or the call a step between graphs.  Returns
        (args, kwargs with the inputs, the call's result, whether it drew), the call made, or
        (None, None, None, the call's result) where it ran as written and the graph cannot hold it."""
        flat, _ = tree_flatten((args, kwargs))
        ts = [a for a in flat if isinstance(a, torch.Tensor)]
        if len(ts) != sum(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
            return None   # (tensors inside a container: not copied for the first run)
        if not ts or not all(t.device.type == "cpu" and t.layout == torch.strided and
                             t.dtype in (torch.float32, torch.float64) for t in ts):
            return None
        made: dict[int, torch.Tensor] = {}

        def put(v: Any) -> Any:
            if id(v) in exprs and (type(v) is float or _np_float(v)):
                made.setdefault(id(v), _scalar_tensor(v))
                return made[id(v)]
            return v
        args2, kwargs2 = tuple(put(a) for a in args), {k: put(v) for k, v in kwargs.items()}
        if len(made) != len(exprs):
            return None   # (a followed number it takes inside a container, or not at all)
        copies = {id(t): t.detach().clone().requires_grad_(t.requires_grad) for t in ts}
        cp = lambda v: copies.get(id(v), v) if isinstance(v, torch.Tensor) else v   # noqa: E731
        state, tok0 = torch.get_rng_state(), _rng_token()
        try:
            res2 = func(*[cp(a) for a in args2], **{k: cp(v) for k, v in kwargs2.items()})
        except Exception:
            res2 = None
        tok2 = _rng_token()
        torch.set_rng_state(state)
        vers = [(t._version, t.detach().clone()) for t in ts]   # (aten's batch_norm writes without a version bump)
        res = func(*args, **kwargs)
        tok1 = _rng_token()
        outs, _ = tree_flatten(res)
        if res2 is None or not outs or not all(isinstance(o, torch.Tensor) for o in outs) or \
                not _same_result(res, res2) or tok1 != tok2 or \
                any(t._version != v or not _same_result(t.detach(), c) for t, (v, c) in zip(ts, vers)):
            return None, None, None, res   # (the same call as written has run: the caller uses its result)
        for vid, t in made.items():
            self._number_input(t, _scalar_tensor, exprs[vid], None)
        return args2, kwargs2, res, tok1 != tok0

    def _number_tensor_apply(self, cls: type, args: list, exprs: dict) -> list | None:
        """`cls.apply(*args)` (a pure custom autograd.Function, grad_hooks._function_node) with
        the followed floats of `exprs` among args as 0-d float64 graph inputs, where it gives
        the same results and gradients with them on copies of its CPU float32 / float64 tensors
        (as `_number_tensor_call`), else None.  The call itself runs later, as written."""
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        if not ts or not all(t.device.type == "cpu" and t.layout == torch.strided and
                             t.dtype in (torch.float32, torch.float64) for t in ts):
            return None
        made: dict[int, torch.Tensor] = {}
        for a in args:
            if id(a) in exprs and (type(a) is float or _np_float(a)):
                made.setdefault(id(a), _scalar_tensor(a))
        if not made or len(made) != len(exprs):
            return None
        args2 = [made.get(id(a), a) for a in args]
        state, tok = torch.get_rng_state(), _rng_token()
        outs = []
        try:
            for given in (args, args2):
                cs = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                      for a in given]
                with torch.enable_grad():
                    r = cls.apply(*cs)
                    rs = [r] if isinstance(r, torch.Tensor) else [x for x in r if isinstance(x, torch.Tensor)]
                    need = [c for c in cs if isinstance(c, torch.Tensor) and c.requires_grad]
                    diff = [x for x in rs if x.requires_grad]
                    gs = torch.autograd.grad([x.sum() for x in diff], need, allow_unused=True) if diff and need else ()
                outs.append((r, [g if g is not None else 0 for g in gs], cs))
        except Exception:
            return None
        finally:
            torch.set_rng_state(state)
        (r1, g1, c1), (r2, g2, c2) = outs
        if _rng_token() != tok or not _same_result(r1, r2) or len(g1) != len(g2) or \
                not all(_same_result(a, b) for a, b in zip(g1, g2)) or \
                not all(_same_result(a.detach(), b.detach()) for a, b in zip(c1, c2) if isinstance(a, torch.Tensor)):
            return None
        for a in args:
            if id(a) in made:
                self._number_input(made[id(a)], _scalar_tensor, exprs[id(a)], None)
        return args2
