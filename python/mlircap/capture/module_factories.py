"""Modules made by the function (`_ModuleFactoryMixin`): `self.head = nn.Linear(h.shape[-1],
3)` on the first call (a head created lazily), `nn.Softmax(dim=-1)(x)` made and called
in place.  The constructor is not traced (its parameters' initialization would be tensors
of no graph): it is a replayed call, run again by every replay with the same constant
arguments, so each replay makes its own module as eager does, and where the open graph
has not drawn from torch's RNG it runs before that graph instead of splitting it
(graph_steps._hoisted_step: the constructor's draws then come before the graph's, as in eager).

The module it returns, its submodules and their parameters and buffers are new objects of
each replay: they are sourced through the replay's result (`b3._parameters['weight']`,
kind "fresh"), not as constants guarded by identity: a parameter is a graph input read
from there, an attribute a guarded read of it, a write to it or the module stored into the
program's state (`self.head = b3`) a replayed write of that expression."""
from __future__ import annotations

import copy
import inspect
import types
from typing import Any

import torch

from .base import _MISSING
from .classify import _PRIM
from .draws import _node_draws
from .external_calls import _ExternalCallMixin
from .frame_hook import _E
from .guard_kinds import Keys, NoKey, TypeIs
from .typeinfo import _is_data_descr, _mro_lookup

_STORES = ("_parameters", "_buffers", "_modules")


def _module_arg(x: object, fresh: dict[int, torch.nn.Module], depth: int = 0) -> bool:
    """x is a constant a module constructor may take: numbers, strings, None, dtypes and
    devices, classes (`act_layer=nn.GELU`), modules the call made before (`fresh`:
    `nn.Sequential(nn.Linear(8, 4), nn.ReLU())`), and tuples and lists of them."""
    if x is None or type(x) in _PRIM or isinstance(x, (type, torch.dtype, torch.device)):
        return True
    if isinstance(x, torch.nn.Module):
        return fresh.get(id(x)) is x
    if depth < 3 and type(x) in (list, tuple):
        return all(_module_arg(y, fresh, depth + 1) for y in x)
    return False


def _optimizer_class(f: object) -> bool:
    """f is an optimizer class of torch.optim (torch's own, not a subclass the program defines)."""
    return isinstance(f, type) and issubclass(f, torch.optim.Optimizer) and \
        (getattr(f, "__module__", "") or "").startswith("torch.optim.")


_PARAM_WALKS = {torch.nn.Module.parameters.__code__: "parameters"}


def _optimizer_arg(rec: Any, x: object, gens: list, depth: int = 0) -> bool:
    """x is an argument an optimizer constructor may take from a replayed call: a constant
    (numbers, strings, None, tuples of them: betas), a tensor the replay names, a module's
    `parameters()` generator not started (its module sourced, not opaque: noted in gens, named
    `{module}.parameters(recurse)`), and lists / tuples / dicts (param groups) of those."""
    if x is None or type(x) in _PRIM:
        return True
    if isinstance(x, (torch.Tensor, torch.nn.Module)) and id(x) not in rec.src:
        rec._fresh_path(x)   # (`inner[0]`: reached through untraced torch code)
    if isinstance(x, torch.Tensor):
        s = rec.src.get(id(x))
        return s is not None and s[2] != "opaque" or rec.env.get(id(x)) is not None and rec.env[id(x)][0] is x
    if type(x) is types.GeneratorType:
        fr = x.gi_frame
        walk = _PARAM_WALKS.get(x.gi_code)
        if walk is None or fr is None or inspect.getgeneratorstate(x) != inspect.GEN_CREATED:
            return False
        loc = fr.f_locals
        m, recurse = loc.get("self"), loc.get("recurse", True)
        if isinstance(m, torch.nn.Module) and id(m) not in rec.src:
            rec._fresh_path(m)
        s = rec.src.get(id(m)) if isinstance(m, torch.nn.Module) else None
        if s is None or s[2] == "opaque" or type(recurse) is not bool:
            return False
        gens.append((x, f"{s[0]}.{walk}({recurse!r})", f"{s[1]}.{walk}()"))
        return True
    if depth < 3 and type(x) in (list, tuple):
        return all(_optimizer_arg(rec, y, gens, depth + 1) for y in x)
    if depth < 3 and type(x) is dict:
        return all(type(k) is str and _optimizer_arg(rec, y, gens, depth + 1) for k, y in x.items())
    return False


_MAKES_TENSORS: dict[tuple, bool] = {}


def _bare_module_class(f: type, args: list, kwargs: dict) -> bool:
    """f(), a module class of any library or of the program whose constructor is nn.Module's
    own (transformers' `ACT2FN["silu"]` makes a SiLUActivation each call): it makes an empty
    module, reading and writing nothing of the program, as torch.nn's own classes do."""
    return not args and not kwargs and f.__init__ is torch.nn.Module.__init__ and f.__new__ is object.__new__ and \
        type(f) is type


def _makes_tensors(f: type, args: list, kwargs: dict) -> bool:
    """Whether the torch.nn module f(*args, **kwargs) has parameters or buffers (which its
    constructor initializes, drawing from torch's RNG): made once on the meta device with
    the RNG state restored, remembered per class and arguments.  One that has none
    (`nn.ReLU()`, `nn.Softmax(dim=-1)`) needs no replayed constructor: traced as any object
    the call makes, it never splits a graph."""
    if any(isinstance(a, torch.nn.Module) for a in list(args) + list(kwargs.values())):
        return True
    try:
        key = (f, tuple(args), tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:
        key = None
    got = _MAKES_TENSORS.get(key) if key is not None else None
    if got is None:
        try:
            with torch.random.fork_rng(devices=[]), torch.device("meta"):
                m = f(*args, **kwargs)
            got = next(m.parameters(), None) is not None or next(m.buffers(), None) is not None
        except Exception:
            got = True
        if key is not None and len(_MAKES_TENSORS) < 4096:
            _MAKES_TENSORS[key] = got
    return got


class _ModuleFactoryMixin(_ExternalCallMixin):
    """For `_Recorder` (through `_SpecialCallMixin`): `_module_factory_call` at the call of
    an nn.Module class, `_source_fresh_module` for what it returns, `_fresh_module_attr`
    for the attribute reads of such a module."""

    def _module_factory_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict,
                             slot: int | None) -> bool:
        """`nn.Linear(8, 3)`: an nn.Module class called with constant arguments, run as a
        replayed call (hoisted before the open graph where it can be).  False: any other call."""
        if slot is None:
            return False
        if f is copy.deepcopy and len(args) == 1 and not kwargs and isinstance(args[0], torch.nn.Module) and \
                id(args[0]) in self.src and self.src[id(args[0])][2] != "opaque":
            # `self.teacher = copy.deepcopy(self.student)` (an EMA teacher made on the first
            # call): the copy reads the module's state as it is at that point of the call, so
            # it runs there (not before the open graph, which may have written it)
            self._external_call(frame, f, args, kwargs, f"copy.deepcopy of {type(args[0]).__qualname__}", slot)
        elif _optimizer_class(f):
            return self._optimizer_factory_call(frame, f, args, kwargs, slot)
        elif not isinstance(f, type) or not issubclass(f, torch.nn.Module) or \
                not all(_module_arg(x, self.fresh_modules) for x in list(args) + list(kwargs.values())) or \
                torch.nn.modules.lazy.LazyModuleMixin in f.__mro__:   # (its parameters made by its first call)
            return False
        else:
            # torch's own module classes only make the module from their arguments (constants,
            # modules this call made): their constructors read and write nothing of the program
            inert = (getattr(f, "__module__", "") or "").startswith("torch.nn.") or _bare_module_class(f, args, kwargs)
            if inert and not self._hoistable() and not _makes_tensors(f, args, kwargs):
                # (`nn.ReLU()(x)` after a dropout: traced as before, a plain object of the
                # call, instead of a replayed constructor that would split the graph)
                return False
            self._external_call(frame, f, args, kwargs, f"module {f.__qualname__} made by the call", slot,
                                hoist=True, inert=inert)
        fin = self.pending.get(frame)
        if fin is None or not getattr(fin, "is_call", False):
            return True

        def finish(fr: types.FrameType) -> None:
            r = _E.peek(fr, 0)
            if isinstance(r, torch.nn.Module):
                for m in r.modules():
                    self.fresh_modules[id(m)] = m
            fin(fr)
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish
        return True

    def _optimizer_factory_call(self, frame: types.FrameType, f: type, args: list, kwargs: dict, slot: int) -> bool:
        """`torch.optim.SGD(inner.parameters(), lr=0.05)`: an optimizer of torch's own made by the
        call (Reptile's inner loop over a deep copy): a replayed call, each replay making its own
        optimizer over the parameters it names (a module's `parameters()` generator, lists of
        parameters, param-group dicts) with constant hyperparameters.  The optimizer is an
        opaque handle `b{k}`: its methods (`zero_grad`, `step`) are replayed calls on the
        replay's optimizer, an attribute read of it gives up (reads.py), as no guard could name
        the state a replay's optimizer has.  Traced before, its `state` defaultdict could not be
        made again (capture gave up: 'cannot reproduce value of type defaultdict').  False:
        arguments it does not take (the call is traced as before)."""
        gens: list = []
        if not all(_optimizer_arg(self, a, gens) for a in list(args) + list(kwargs.values())):
            return False
        for g, expr, pretty in gens:   # (not started: the replay's call makes its own, unread)
            self.src[id(g)] = (expr, pretty, "opaque")
            self.keep.append(g)
        n0 = self.ncalls
        # (inert: the constructor reads the parameters' identities alone and writes nothing of the program)
        self._external_call(frame, f, args, kwargs, f"optimizer {f.__qualname__} made by the call", slot, inert=True)
        fin = self.pending.get(frame)
        if self.ncalls != n0 + 1 or fin is None or not getattr(fin, "is_call", False):
            return True
        name = f"b{n0}"

        def made(fr: types.FrameType) -> None:
            r = _E.peek(fr, 0)
            if isinstance(r, torch.optim.Optimizer):   # (sourced opaque before its result is: no walk of its state)
                self.src[id(r)] = (name, f"<optimizer {type(r).__qualname__} made by the call>", "opaque")
                self.keep.append(r)
            fin(fr)
        made.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = made
        return True

    def _fresh_path(self, x: torch.Tensor | torch.nn.Module) -> None:
        """x, a submodule or a parameter / buffer of a module the call made, reached through
        untraced torch code (`inner[0]`, Sequential.__getitem__): sourced through the path from
        that module's result, where one is found."""
        for m in list(self.fresh_modules.values()):
            s = self.src.get(id(m))
            if s is None or s[2] != "fresh":
                continue
            for store in _STORES:
                for k, v in m.__dict__[store].items():
                    if v is x:
                        self._fresh_read(f"{s[0]}.{store}[{k!r}]", f"{s[1]}.{k}", v)
                        return
            for k, v in m.__dict__["_modules"].items():
                if isinstance(v, torch.nn.Module) and id(v) not in self.src and \
                        any(y is x for y in list(v.modules()) + list(v.parameters()) + list(v.buffers())):
                    self._fresh_read(f"{s[0]}._modules[{k!r}]", f"{s[1]}.{k}", v)
                    self._fresh_path(x)
                    return

    def _hoistable(self) -> bool:
        """A replayed call met now can run before the open graph (graph_steps._hoisted_step)."""
        seg = self.cur
        # (graph_steps._hoisted_step's conditions, all of them: where it would not hoist, a module
        # without tensors is traced as a plain object instead of splitting the graph there)
        return seg is not None and bool(seg.nops) and self.defer_window is None and \
            not any(c[0] == seg.idx for c in self.spec_checks) and not any(_node_draws(n) for n in seg.graph.nodes)

    def _source_fresh_module(self, v: torch.nn.Module, expr: str, pretty: str) -> None:
        """v, a module the call made (or a submodule of one), read from expr: its type is
        guarded, its state is read through expr."""
        self.guard(TypeIs(expr, f"type({pretty})", type(v)))
        self.src[id(v)] = (expr, pretty, "fresh")
        self.keep.append(v)
        self._snap(v, expr, pretty)
        self.hooked.add(id(v))   # (its hooks are its constructor's, made again by each replay)
        _, raw = _mro_lookup(type(v), "forward")
        self._class_guard(type(v), "forward", raw, f"type({pretty}).forward")

    def _fresh_read(self, expr: str, pretty: str, v: Any) -> None:
        if self.read_exprs.get(expr) == self.epoch:
            return
        self.read_exprs[expr] = self.epoch
        self._source(v, expr, pretty, argrooted=True)

    def _fresh_module_tree(self, m: torch.nn.Module, expr: str, pretty: str, seen: set[int]) -> None:
        """`m.parameters()`, `m.modules()` of a module the call made (untraced torch code
        walks it): its parameters, buffers and submodules read through expr, their names
        guarded (a copy made by `copy.deepcopy` has those of the module it copies)."""
        for store in _STORES:
            d = m.__dict__[store]
            self.guard(Keys(f"{expr}.{store}", f"{pretty}.{store}", tuple(d.keys())))
            for k, v in d.items():
                self._fresh_read(f"{expr}.{store}[{k!r}]", f"{pretty}.{k}", v)
                if isinstance(v, torch.nn.Module):
                    s = self.src.get(id(v))
                    if s is not None and s[2] == "fresh" and id(v) not in seen:
                        seen.add(id(v))
                        self._fresh_module_tree(v, s[0], s[1], seen)

    def _fresh_module_attr(self, obj: torch.nn.Module, name: str, expr: str, pretty: str) -> None:
        """`m.weight`, `m.dim`, `m.fc` of a module the call made: read through expr."""
        if (id(obj), name) in self.dirty:
            return
        d = obj.__dict__
        _, raw = _mro_lookup(type(obj), name)
        if raw is not _MISSING and (_is_data_descr(raw) or name not in d):
            self._class_guard(type(obj), name, raw, f"type({pretty}).{name}")
            return
        if name in d:
            self._fresh_read(f"{expr}.__dict__[{name!r}]", f"{pretty}.{name}", d[name])
            return
        for store in _STORES:
            sd = d.get(store)
            if type(sd) is dict and name in sd:
                self._fresh_read(f"{expr}.{store}[{name!r}]", f"{pretty}.{name}", sd[name])
                return
        if raw is _MISSING:
            # (`hasattr(teacher, "x")` False: a copy made by copy.deepcopy has the attributes
            # of the module it copies at the replay)
            self.guard(NoKey(f"{expr}.__dict__", pretty, name))
            for store in _STORES:
                if type(d.get(store)) is dict:
                    self.guard(NoKey(f"{expr}.{store}", f"{pretty}.{store}", name))
            self._class_guard(type(obj), name, _MISSING, f"type({pretty}).{name}")
