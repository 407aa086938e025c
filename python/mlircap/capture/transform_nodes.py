"""torch.func transforms of pure tensor code as one node of the graph (`_TransformNodeMixin`):
`torch.func.jacrev(f)(x)`, `grad`, `grad_and_value`, `vmap` of a closure, `torch.func.vjp(f, x)`
and the function it returns (the forward-mode ones, jvp, jacfwd, hessian, only where none of the
tensors requires grad: _FORWARD_MODE), where f is the user's function whose body is pure
tensor code (grad_hooks' rules, and cells read by LOAD_DEREF) and whose cells hold tensors,
torch's functions, None, bools and strings (no numbers: a float a cell holds may be one the
recording follows, not guarded), or such functions again.  Before, every such call was an
uncapturable call run between graphs (functorch_calls.py), a graph break each, where Dynamo
holds them in its graph.

The transform's wrapper (torch's own closure over the user's function, its argnums and
flags) is taken apart into a template: the tensors its cells hold become graph inputs of the
node, the rest is made again from the same code objects each time the node runs (the node's
target rebuilds the functions with cells holding the node's tensors and calls the wrapper).
The call runs once unrecorded here (its ops see functorch's wrapped tensors); where its result
is a tensor or a flat tuple / list of tensors, the frame gets that result (`_Canned`) and the
graph a node computing it; otherwise the call is an uncapturable one as before (a pure body:
running it again draws nothing and writes nothing).  A user function that reads the program's
modules (`functional_call(self.net, p, (x,))`, `vmap(self.mlp)`, a method of the program's
module) is walked by transform_closures.py: its reads guarded, the torch.nn modules it uses
reparametrized to the node's inputs; such a call runs watched (transform_closures.watched_run:
no draw, no write, no tensor data read as a Python value), and its result may be any nest of
tuples, lists and dicts of tensors (the node returns them flat)."""
from __future__ import annotations

import types
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from .base import Unreplayable, _Canned
from .classify import _classify
from .frame_hook import _E
from .functorch_calls import _FUNCTORCH_DIR, _writes_cells
from .grad_hooks import _GENERATORS, _torch_function, guard_lookups, torch_lookups
from .transform_closures import (FAILED, BodyPlan, body_plan, constant_cell, guard, held_source, library_subtree,
                                 module_tensors, reparametrized, unique, watched_run, writes_buffers)

def _vjp_code() -> types.CodeType:
    from torch._functorch import eager_transforms
    return eager_transforms.vjp.__code__


_VJP_CODE = _vjp_code()
_CELL_OPS = frozenset({"COPY_FREE_VARS", "LOAD_DEREF"})
_USER_CONSTS = (bool, str, type(None))
_INTERNAL_CONSTS = (bool, int, str, type(None))


def pure_closure_lookups(fn: types.FunctionType) -> list[tuple[str, object, str | None]] | None:
    """grad_hooks.pure_mapped_function's rules for a function that may read the cells of its
    closure (LOAD_DEREF, never written): the lookups of torch's modules to guard; None where
    its body is not pure tensor code of its arguments and cells."""
    code = fn.__code__
    if fn.__defaults__ or fn.__kwdefaults__ or _classify(code) != "user" or \
            code.co_flags & (0x04 | 0x08 | _GENERATORS) or code.co_cellvars or _writes_cells(code):
        return None
    return torch_lookups(fn, _CELL_OPS)


def _internal(code: types.CodeType) -> bool:
    return code.co_filename.startswith(_FUNCTORCH_DIR)


# forward-mode transforms (jvp, jacfwd and hessian, which is jacfwd of jacrev, linearize): their
# traced graphs hold aten._efficientzerotensor, which the mlircap backend runs through torch
# inside a compiled graph; the compiled backward of a graph holding a jacrev and a jvp of
# tensors that require grad crashed (segfault in the CPU plan): such a call is a node only
# where none of its tensors requires grad (or grad is off), else an uncapturable call
_FORWARD_MODE = ("jvp", "jacfwd.", "linearize", "_jvp_with_argnums")


def _forward_mode(code: types.CodeType) -> bool:
    return code.co_qualname.startswith(_FORWARD_MODE)


def build(spec: tuple, vals: tuple) -> Any:
    """The value a template describes, its tensors taken from vals."""
    kind = spec[0]
    if kind == "leaf":
        return vals[spec[1]]
    if kind == "const":
        return spec[1]
    if kind == "tuple":
        return tuple(build(s, vals) for s in spec[1])
    if kind == "method":
        return types.MethodType(spec[1], spec[2])
    if kind == "dict":
        return {k: build(s, vals) for k, s in zip(spec[1], spec[2])}
    _, code, globals_, name, defaults, kwd, cells = spec
    f = types.FunctionType(code, globals_, name, defaults, tuple(types.CellType(build(c, vals)) for c in cells))
    if kwd:
        f.__kwdefaults__ = dict(kwd)
    return f


class _TransformNodeMixin:
    """For `_Recorder` (through `_SpecialCallMixin`): `_transform_node`."""

    def _tensor_leaf(self, t: torch.Tensor, leaves: list) -> tuple:
        e = self.env.get(id(t))
        if not (e is not None and e[0] is t or id(t) in self.src and self.src[id(t)][2] != "opaque"):
            raise Unreplayable("a tensor of no graph")
        for i, x in enumerate(leaves):
            if x is t:
                return ("leaf", i)
        leaves.append(t)
        return ("leaf", len(leaves) - 1)

    def _template(self, v: Any, leaves: list, lookups: list, internal: bool, depth: int) -> tuple:
        """A cell's (or an argument's) value as a template; Unreplayable where it cannot be one."""
        if isinstance(v, torch.Tensor):
            if type(v) is not torch.Tensor and type(v) is not torch.nn.Parameter:
                raise Unreplayable("a tensor subclass")
            return self._tensor_leaf(v, leaves)
        if type(v) is tuple and depth < 6:
            return ("tuple", tuple(self._template(x, leaves, lookups, internal, depth + 1) for x in v))
        if type(v) is dict and not internal and depth < 6 and all(type(k) is str for k in v):
            return ("dict", tuple(v), tuple(self._template(x, leaves, lookups, False, depth + 1) for x in v.values()))
        if isinstance(v, torch.nn.Module) or type(v) is types.MethodType and isinstance(v.__self__, torch.nn.Module):
            m = v if isinstance(v, torch.nn.Module) else v.__self__
            if not held_source(self.src.get(id(m))):
                raise Unreplayable("a module the recording has no source for (or one the call made)")
            if internal or m is not v:   # (`vmap(self.mlp)`, `vmap(self.step)`, a bound method in a cell)
                plan = BodyPlan()
                if m is v:
                    plan.used.append(m)   # (called: a module of torch.nn's classes, reparametrized)
                if m is not v and (type(v.__func__) is not types.FunctionType or v.__func__.__closure__ or
                                   body_plan(v.__func__, plan, m) is None):
                    raise Unreplayable("a method that is not pure tensor code")
                lookups.append((m, plan))
                return ("const", v) if m is v else ("method", v.__func__, v.__self__)
            return ("const", v)   # (a module in a cell: what the body reads of it guarded, transform_closures.guard)
        if type(v) is types.FunctionType and depth < 6:
            code = v.__code__
            inside = _internal(code)
            if inside and _forward_mode(code):
                lookups.append((None, "forward"))
            if not inside:
                lk = pure_closure_lookups(v)
                if lk is None:
                    lk = body_plan(v)   # (reads the program's modules: transform_closures.py)
                if lk is None:
                    raise Unreplayable(f"{v.__qualname__} is not pure tensor code")
                lookups.append((v, lk))
            cells = []
            for name, c in zip(code.co_freevars, v.__closure__ or ()):
                try:
                    x = c.cell_contents
                except ValueError:
                    raise Unreplayable("an empty cell") from None
                if not inside and type(x) in (int, float) and constant_cell(self.__dict__.get("tframe"), code, name, x):
                    cells.append(("const", x))   # (`cls = 1` in the function that made it)
                    continue
                cells.append(self._template(x, leaves, lookups, inside, depth + 1))
            kwd = tuple(sorted(v.__kwdefaults__.items())) if v.__kwdefaults__ else None
            if kwd is not None and not all(type(x) in _INTERNAL_CONSTS for _, x in kwd):
                raise Unreplayable("keyword defaults")
            return ("fn", code, v.__globals__, v.__name__, v.__defaults__, kwd, tuple(cells))
        if type(v) in (_INTERNAL_CONSTS if internal else _USER_CONSTS):
            return ("const", v)
        if internal and isinstance(v, types.ModuleType):
            return ("const", v)
        if isinstance(v, types.BuiltinFunctionType) and _torch_function(getattr(v, "__name__", ""), v):
            return ("const", v)
        raise Unreplayable(f"a {type(v).__name__}")

    def _transform_node(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int) -> bool:
        """`f(*args)`, f a torch.func transform's wrapper (or `torch.func.vjp` itself, or
        the function a `vjp` this recording made a node of returned): one node of the open graph
        where the function it transforms is pure tensor code (module doc).  False: not such a
        call (nothing done)."""
        if kwargs or self.np_env or type(f) is not types.FunctionType or not _internal(f.__code__):
            return False
        pulls = self.__dict__.setdefault("vjp_pulls", {})
        self.tframe = frame.f_code
        leaves: list[torch.Tensor] = []
        lookups: list = []
        pull = pulls.get(id(f))
        try:
            if pull is not None and pull[0] is f:
                # the function vjp returned, called: vjp made again in the node, its function
                # called (the forward runs again there: a pure body computes the same)
                leaves, lookups, fspec, aspec = list(pull[1]), [], pull[2], pull[3]
            else:
                pull = None
                fspec = self._template(f, leaves, lookups, True, 0)
                aspec = tuple(self._template(a, leaves, lookups, False, 0) for a in args)
            cspec = tuple(self._template(a, leaves, lookups, False, 0) for a in args) if pull is not None else ()
        except Unreplayable:
            return False
        plans = [lk for _, lk in lookups if isinstance(lk, BodyPlan)]
        used = unique([m for p in plans for m in p.used])
        if plans and (pull is not None or f.__code__ is _VJP_CODE or
                      not all(library_subtree(m) and not writes_buffers(m) for m in used)):
            return False
        if not leaves and not used:
            return False
        if any(fn is None for fn, _ in lookups):
            # a forward-mode transform: only where no backward goes through the node (its graph
            # holds aten._efficientzerotensor; see _FORWARD_MODE)
            if torch.is_grad_enabled() and any(t.requires_grad for t in leaves + [t for m in used
                                                                                for _, t in module_tensors(m)]):
                return False
            lookups = [e for e in lookups if e[0] is not None]
        res, wrote = watched_run(self, f, args, leaves + [t for m in used for _, t in module_tensors(m)])
        if res is FAILED:
            return False
        if wrote:   # (its writes happened once, as eager's: the call's result kept, the function run eagerly)
            self.unreplayable = self.unreplayable or "a torch.func transform's function wrote its input tensor"
            _E.poke(frame, slot, _Canned(res))
            return True
        is_vjp = f.__code__ is _VJP_CODE
        if is_vjp and not (type(res) is tuple and len(res) == 2 and type(res[1]) is types.FunctionType):
            return False
        out = res[0] if is_vjp else res
        outs, _ = tree_flatten(out)
        if not outs or not all(type(t) is torch.Tensor for t in outs):
            return False
        flat = not isinstance(out, torch.Tensor) and not (type(out) in (tuple, list) and len(outs) == len(out))
        for fn, lk in lookups:
            if type(fn) is types.FunctionType and id(fn) in self.src:
                self.read(f"{self.const(fn)}.__code__", f"{fn.__qualname__}.__code__", fn.__code__)
            if not isinstance(lk, BodyPlan):
                guard_lookups(self, fn, lk)
        try:
            for p in plans:
                guard(self, p)
            # (the modules the bodies use: their parameters and buffers the node's inputs)
            mods = [(m, [n for n, _ in module_tensors(m)], [self._tensor_leaf(t, leaves)[1] for _, t in
                                                              module_tensors(m)]) for m in used]
        except Unreplayable:
            return False

        def transformed(*vals: Any) -> Any:
            r = build(fspec, vals)(*(build(s, vals) for s in aspec))
            if pull is not None:
                return r[1](*(build(s, vals) for s in cspec))
            r = r[0] if is_vjp else r
            return tuple(tree_flatten(r)[0]) if flat else r
        run = reparametrized(transformed, mods) if mods else transformed
        qual = getattr(f, "__qualname__", "transform")
        run.__name__ = run.__qualname__ = f"func_{qual.split('.')[-1]}"
        try:
            self._record(run, "torch.func transform", tuple(leaves), {}, tuple(outs) if flat else out)
        except Unreplayable:
            return False
        if is_vjp:
            self.keep.append(res)
            pulls[id(res[1])] = (res[1], tuple(leaves), fspec, aspec)
        _E.poke(frame, slot, _Canned(res))
        return True
