"""`_CallGuardMixin` (for calls._CallMixin): what a call depends on besides its arguments, guarded:
a module call's hooks, its forward and its type's __call__ (and the global module hooks), an
isinstance / issubclass a metaclass answers; and the callees a frame that ends up running eagerly
could be captured as (replay.SkipFrameVariant)."""
from __future__ import annotations

import types
from typing import Any

import torch

from .base import Unreplayable
from .guard_kinds import Is, Lengths, TypeIs
from .typeinfo import _mro_lookup
from .classify import _TORCH_DIR, _classify

_MAX_CALLEES = 256   # modules / functions noted per recording (SkipFrameVariant captures them)


def _is_protocol(c: type) -> bool:
    """c is a typing Protocol class (runtime_checkable: isinstance checks x's attributes)."""
    return bool(getattr(c, "_is_protocol", False))


class _CallGuardMixin:
    """For `_Recorder` (through `_CallMixin`): guards a call needs beyond its arguments."""

    def _note_callee(self, frame: types.FrameType, f: Any) -> None:
        """What the call could be captured as if this frame ends up running eagerly (a loop
        that breaks on every iteration: replay.SkipFrameVariant): a module called anywhere
        in the traced code, or a user function called by the captured frame itself."""
        if isinstance(f, torch.nn.Module):
            if len(self.called_modules) < _MAX_CALLEES:
                self.called_modules[id(f)] = f
            return
        fn = f.__func__ if type(f) is types.MethodType else f
        if type(fn) is types.FunctionType and frame.f_code is self.code and \
                len(self.called_funcs) < _MAX_CALLEES and _classify(fn.__code__) == "user" and \
                fn.__code__ not in self.code.co_consts and \
                not fn.__code__.co_filename.startswith(_TORCH_DIR):
            # (not one the frame makes, a new one per call; nor torch's own traced getters, as
            # LRScheduler.get_last_lr, whose list of floats captured on its own recompiled per value)
            self.called_funcs[id(fn)] = fn

    def _guard_class_check(self, f: Any, x: Any, classes: Any) -> None:
        """isinstance(x, C) / issubclass(X, C) where C's metaclass decides (an abc.ABC, whose
        answer changes with C.register(T) after compile; a typing Protocol): the answer is
        guarded, as issubclass(type of x, C) (type(x) is guarded where x is read).  Other
        classes answer by the MRO of x's type alone."""
        cs = classes if type(classes) is tuple else (classes,)
        if not any(isinstance(c, type) and (type(c).__instancecheck__ is not type.__instancecheck__ or
                                            type(c).__subclasscheck__ is not type.__subclasscheck__) for c in cs):
            return
        t = x if f is issubclass else type(x)
        if not isinstance(t, type) or any(not isinstance(c, type) for c in cs):
            return
        try:
            res = f(x, classes)
        except Exception:
            return   # (raises: as eager)
        ce = self.const(cs if type(classes) is tuple else classes)
        cname = getattr(classes, "__qualname__", classes)
        try:
            by_type = issubclass(t, classes) is res
        except Exception:   # a typing Protocol with data members: no issubclass
            by_type = False
        if by_type and (f is issubclass or not any(_is_protocol(c) for c in cs)):
            self.guard(Is(f"issubclass({self.const(t)}, {ce})", f"issubclass({t.__qualname__}, {cname})",
                          res, repr(res)))
            return
        # answered from x itself (a runtime_checkable Protocol reads x's attributes: B.scale
        # set after compile made isinstance(b, HasScale) True): the answer is guarded on x,
        # which must be a value a replay can name
        s = self.src.get(id(x))
        if s is None or s[2] == "opaque" or isinstance(x, torch.Tensor):
            raise Unreplayable(f"isinstance of a {t.__qualname__} answered by {type(cs[0]).__name__} from the object")
        self.guard(Is(f"isinstance({s[0]}, {ce})", f"isinstance({s[1]}, {cname})", res, repr(res)))

    def _guard_module_call(self, mod: torch.nn.Module, pretty: str, forward: bool = True) -> None:
        """What calling `mod` runs besides traced code: its hooks and the global module hooks
        (guarded empty or by count), and (`forward`) what `mod.forward` resolves to (an
        instance attribute, or the class's method, guarded against monkeypatching)."""
        self.hooked.add(id(mod))
        hs = [mod._forward_hooks, mod._forward_pre_hooks, mod._backward_hooks, mod._backward_pre_hooks]
        self.guard(Lengths(tuple(hs), tuple(len(h) for h in hs), pretty), group=tuple(hs))
        for name, hd in (("_forward_hooks", hs[0]), ("_forward_pre_hooks", hs[1])):
            # a hook closing over the program's state (`feats[name] = out`, a dict of the enclosing
            # function): sourced, its cells are external state whose writes the replay makes
            # (unsourced, the write went untracked and the dict held the first call's tensor)
            kw = mod._forward_hooks_with_kwargs if name == "_forward_hooks" else mod._forward_pre_hooks_with_kwargs
            for k, h in hd.items():
                if type(h) is types.FunctionType and h.__closure__ and id(h) not in self.src:
                    self._source(h, f"{self.const(hd)}[{k!r}]", f"{pretty}.{name}[{k!r}]", False, 1)
                # (or as a default argument, `lambda m, i, o, feats=feats: ...`: hook(module, args[, kwargs][, out]))
                self._source_defaults(h, [None] * (2 + (name == "_forward_hooks") + bool(kw.get(k))), {})
        d = mod.__dict__
        if forward and "forward" in d:
            self.read(f"{self.const(d)}['forward']", f"{pretty}.forward", d["forward"], id(mod), "forward",
                      group=(d,))
        elif forward:
            self._class_attr(mod, "forward", pretty)
        # `mod.__class__ = Other` keeps the module (and its dicts): its type guarded (the
        # variant checks these in one call, guard_batches.TypesHold)
        self.guard(TypeIs(self.const(mod), f"type({pretty})", type(mod)))
        if forward:
            # `mod(x)` runs type(mod).__call__: nn.Module's (which calls forward), or one the
            # class defines or is given later (A.__call__ = f: a replay still ran forward)
            cls = type(mod)
            self._class_guard(cls, "__call__", _mro_lookup(cls, "__call__")[1], f"type({pretty}).__call__")
        if not self.hooked_global:
            self.hooked_global = True
            mm = torch.nn.modules.module
            gs = [mm._global_forward_hooks, mm._global_forward_pre_hooks, mm._global_backward_hooks,
                  mm._global_backward_pre_hooks, mm._global_forward_hooks_always_called]
            self.guard(Lengths(tuple(gs), tuple(len(x) for x in gs), "global nn.Module"), group=tuple(gs))
