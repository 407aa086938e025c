"""Calls of torch.optim optimizers and LR schedulers and of nn.Module's own gradient walks
(`opt.step()`, `opt.zero_grad()`, `sched.step()`, `module.zero_grad()`,
`module.requires_grad_()`): library code run at replay as it is, once per call, and when
such a call writes no state of the program but its own."""
from __future__ import annotations

import os
import types
import weakref

import torch

from .classify import _TORCH_DIR


def _optimizer_step(f: object, args: list) -> bool:
    """`opt.step()` / `opt.zero_grad()` of a torch.optim optimizer (bound, or the function
    with the optimizer first): it reads and writes its own state (momentum buffers made on the
    first step, in a dict the tracer does not see) and the parameters and their .grad, so it
    runs at replay as it is, once per call (an uncapturable call), not recorded op by op.
    So do nn.Module's own `module.zero_grad()` and `module.requires_grad_(flag)`: untraced
    library code that walks the module's parameters and writes their .grad / requires_grad
    (capture gave up on the whole function: 'tensor of unknown origin', the parameters reached
    through its untraced walk)."""
    name = getattr(f, "__name__", None)
    if name not in ("step", "zero_grad", "requires_grad_"):
        return False
    so = getattr(f, "__self__", None)
    if so is None:
        so = _lr_scheduler_optimizer(f)
    if so is None and args:
        so = args[0]
    if isinstance(so, torch.optim.Optimizer):
        return name != "requires_grad_"
    return isinstance(so, torch.nn.Module) and any(getattr(f, "__func__", f) is g for g in _MODULE_GRAD_CALLS)


def _averaged_model_update(f: object, args: list) -> bool:
    """`ema.update_parameters(model)` of torch.optim.swa_utils.AveragedModel (torch's own method,
    bound or with the AveragedModel first): like an optimizer's step it walks both modules'
    parameters in untraced library code and writes the averaged copies and its `n_averaged`
    counter in place, so it runs at replay as it is, once per call (capture gave up on the whole
    function: 'tensor of unknown origin', the counter compared in that code)."""
    from torch.optim.swa_utils import AveragedModel

    so = getattr(f, "__self__", None)
    if so is None and args:
        so = args[0]
    return isinstance(so, AveragedModel) and getattr(f, "__func__", f) is AveragedModel.update_parameters \
        and getattr(type(so), "update_parameters", None) is AveragedModel.update_parameters


def _grad_scaler_call(f: object, args: list) -> bool:
    """`scaler.unscale_(opt)` / `scaler.step(opt)` / `scaler.update()` / `scaler.get_scale()` of a
    torch.amp.GradScaler (torch's own methods, bound or with the scaler first): library code that
    reads and writes the scaler's own state (its per-optimizer stages, `_scale`, the growth tracker)
    and the optimizer's gradients in place, whose inf check is read as a number (`.item()`) to decide
    whether the optimizer steps.  Run at replay as it is, once per call, as an optimizer's step
    (recorded op by op, capture gave up on the whole function: the optimizer's state, its stage
    dict written in untraced code, a data-dependent `.item()`)."""
    from torch.amp.grad_scaler import GradScaler

    fn = getattr(f, "__func__", f)
    name = getattr(fn, "__name__", None)
    if name not in _GRAD_SCALER_CALLS:
        return False
    so = getattr(f, "__self__", None)
    if so is None and args:
        so = args[0]
    return isinstance(so, GradScaler) and getattr(GradScaler, name, None) is fn and getattr(type(so), name, None) is fn


_GRAD_SCALER_CALLS = ("unscale_", "step", "update", "get_scale")


def _grad_scaler_owning_call(f: object, args: list, kwargs: dict) -> _ScalerState | None:
    """The state of a GradScaler call (_grad_scaler_call) that writes no state of the program but
    the scaler's own (its per-optimizer stage dicts), its optimizer's (a step: `opt.step()`, where
    that is an optimizer step writing its own state alone, _optimizer_owning_call) and tensors in
    place (the gradients, the parameters, the scale and its growth tracker): `unscale_(opt)` /
    `step(opt)` of a torch.optim optimizer without custom scale handling
    (`_step_supports_amp_scaling`: its step gets the scaler's tensors as attributes set on it),
    `update()` without a new scale, `get_scale()`.  As after an optimizer's step, what the program
    read before it needs no guard again after it.  None: not such a call."""
    if kwargs or not _grad_scaler_call(f, args):
        return None
    so = getattr(f, "__self__", None)
    if so is None:
        so, args = args[0], args[1:]
    name = getattr(f, "__func__", f).__name__
    if name in ("update", "get_scale"):
        return None if args else _ScalerState(so, None, False)
    if len(args) != 1 or not isinstance(args[0], torch.optim.Optimizer) or \
            getattr(args[0], "_step_supports_amp_scaling", False):
        return None
    opt = args[0]
    if name == "step" and so._enabled is not True and not so._enabled:
        return None   # (a disabled scaler calls opt.step() as it is: its own rule)
    if name == "step" and _optimizer_owning_call(opt.step, [], {}) is not opt:
        return None
    return _ScalerState(so, opt, name == "step")


class _ScalerState:
    """The own state of a GradScaler call (_grad_scaler_owning_call): `state` (read after the
    call) holds the scaler's per-optimizer dicts and, for a step, its optimizer's state, which
    the recording may not read after the call (sources._source gives up there); `opt` the
    optimizer whose step hooks are guarded to stay none (its step: the optimizer's own rule)."""

    def __init__(self, scaler: object, opt: torch.optim.Optimizer | None, steps: bool) -> None:
        self.scaler, self.opt, self.steps = scaler, opt, steps
        self.before = self.objects()

    def objects(self) -> list:
        """The scaler and the dicts of its attributes (the per-optimizer stage dicts in them):
        what the call writes of the scaler's Python state (update() sets a new dict)."""
        objs, work = [self.scaler], [self.scaler.__dict__]
        while work:
            d = work.pop()
            for v in d.values():
                if isinstance(v, dict) and len(objs) < 256:
                    objs.append(v)
                    work.append(v)
        return objs

    @property
    def state(self) -> dict:
        per = self.scaler.__dict__.get("_per_optimizer_states", {})
        objs = [per, *per.values()]
        if self.steps:
            objs += [self.opt.state, *self.opt.state.values()]
        return dict(enumerate(objs))


_MODULE_GRAD_CALLS = (torch.nn.Module.zero_grad, torch.nn.Module.requires_grad_)
_LR_SCHEDULER_FILE = os.path.join(_TORCH_DIR, "optim", "lr_scheduler.py")


def _lr_scheduler_call(f: object, args: list) -> bool:
    """`sched.step()` of a torch.optim.lr_scheduler scheduler of torch's own
    class (bound, or the function with the scheduler first): untraced library code that writes the
    scheduler's counters (`last_epoch`) and its optimizer's learning rates, replayed between graphs
    (an uncapturable call).  Run as untraced code, its writes were diffed at the recording's end
    and replayed as constants, its counter guarded by value: a new variant every call."""
    fn = getattr(f, "__func__", f)
    so = getattr(f, "__self__", None)
    if so is None and args and type(f) is types.FunctionType:
        so, args = args[0], args[1:]
    name = getattr(fn, "__name__", None)
    return name == "step" and not args and isinstance(so, torch.optim.lr_scheduler.LRScheduler) \
        and type(so).__module__ == "torch.optim.lr_scheduler" and getattr(type(so), name, None) is fn


def _lr_scheduler_optimizer(f: object) -> torch.optim.Optimizer | None:
    """The optimizer whose `step` an LR scheduler wrapped, where `f` is that wrapper (torch's
    LRScheduler sets `opt.step` on the instance to a function of lr_scheduler.py that sets
    `opt._opt_called = True` and calls the step it wrapped): `opt.step()` is then that step of the
    optimizer, not untraced library code whose ops were recorded one by one (an AdamW step under
    a transformers schedule broke the graph at every parameter's `.item()`).  Else None."""
    if type(f) is not types.FunctionType or not getattr(f, "_wrapped_by_lr_sched", False) or \
            f.__code__.co_filename != _LR_SCHEDULER_FILE or f.__code__.co_freevars != ("func", "opt_ref"):
        return None
    opt = f.__closure__[1].cell_contents
    opt = opt() if isinstance(opt, weakref.ref) else None
    return opt if isinstance(opt, torch.optim.Optimizer) and opt.__dict__.get("step") is f else None


def _optimizer_owning_call(f: object, args: list, kwargs: dict) -> torch.optim.Optimizer | None:
    """The optimizer of `opt.step()` / `opt.zero_grad(...)` where that call writes no state of
    the program but its own (its `state` dict, the tensors in it) and tensors in place (the
    parameters, their .grad): a torch.optim class of torch's own (its methods torch's, not a
    subclass's), step without a closure (which runs the user's code) and with no step hook
    registered (global or the optimizer's: the caller guards them to stay so).  After it, what
    the program read before it needs no guard again (no new epoch, epochs._new_epoch): an
    optimizer step in a training function placed its guards again after it (`if step %
    accum == 0`, `opt.param_groups[0]['lr']`), which needed a continuation the frame rarely has
    (a counter written before it), and the function ran eagerly.  None: not such a call."""
    if not _optimizer_step(f, args):
        return None
    so = getattr(f, "__self__", None)
    fn = getattr(f, "__func__", f)
    if so is None:
        so = _lr_scheduler_optimizer(f)
        if so is not None:   # (its wrapper: the class's step, once `so._opt_called = True` is set)
            fn = f.__closure__[f.__code__.co_freevars.index("func")].cell_contents
        else:
            so, args = args[0], args[1:]
    name = f.__name__
    cls = type(so)
    if not cls.__module__.startswith("torch.optim.") or fn is not getattr(cls, name, None):
        return None
    if name == "step":
        if args or kwargs or so._optimizer_step_pre_hooks or so._optimizer_step_post_hooks:
            return None
        from torch.optim import optimizer as _opt
        if _opt._global_optimizer_pre_hooks or _opt._global_optimizer_post_hooks:
            return None
    elif name == "zero_grad":
        flat = list(args) + list(kwargs.values())
        if len(flat) > 1 or kwargs and set(kwargs) != {"set_to_none"} or any(type(a) is not bool for a in flat):
            return None
    else:
        return None
    return so


_TREE_WALK = ("zero_grad", "parameters", "named_parameters", "_named_members", "named_modules")


def _module_zero_grad(f: object, args: list, kwargs: dict) -> torch.nn.Module | None:
    """The module of `module.zero_grad(...)` where that call writes the .grad of its parameters
    alone, as an optimizer's zero_grad does (_optimizer_owning_call): nn.Module's own method,
    every module of the tree walking its parameters with nn.Module's methods (`_TREE_WALK`: the
    caller guards them to stay so), set_to_none a bool.  None: not such a call."""
    so = getattr(f, "__self__", None)
    if so is None and args:
        so, args = args[0], args[1:]
    flat = list(args) + list(kwargs.values())
    if getattr(f, "__func__", f) is not torch.nn.Module.zero_grad or not isinstance(so, torch.nn.Module) or \
            len(flat) > 1 or kwargs and set(kwargs) != {"set_to_none"} or any(type(a) is not bool for a in flat):
        return None
    seen, work = set(), [so]
    while work:
        m = work.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if len(seen) > 4096 or any(getattr(type(m), n, None) is not getattr(torch.nn.Module, n) for n in _TREE_WALK):
            return None
        mods = m.__dict__.get("_modules")
        if type(mods) is not dict:
            return None
        work.extend(c for c in mods.values() if c is not None)
    return so


def _idempotent_call(f: object, args: list) -> bool:
    """`opt.zero_grad()`, `module.zero_grad()`, `module.requires_grad_(flag)` (see
    _optimizer_step): they only set the .grad of parameters to None (or zero) or their
    requires_grad flag, so running one again gives the same state.  A replay that misses
    after it restores the .grad it wrote and records the call again from its start, which runs
    it again (not logged as run once: then the restored gradients were kept, and the backward
    after it accumulated into the previous call's: wrong results)."""
    return getattr(f, "__name__", None) in ("zero_grad", "requires_grad_") and _optimizer_step(f, args)
