"""The user's functions a torch.func transform calls where they are not pure tensor code of
their arguments (transform_nodes' rule) but read the program's modules: per-sample gradients by
`vmap(grad(lambda p, x, y: F.mse_loss(functional_call(self.net, p, (x,)), y)))`, an NTK by
`jacrev(lambda p, x: functional_call(self.net, p, (x,)))`, `grad_and_value(loss, has_aux=True)`
of a closure over `self`.  Before, each such call ran between graphs (functorch_calls.py), a
graph break each, where Dynamo holds them in its graph as a higher-order op.

`body_plan` walks the function's instructions (and those of the comprehensions and lambdas it
makes): what it may read is the function's arguments and locals, its closure's cells, torch's
modules and functions through globals (`F.mse_loss`, `functional_call`), a few builtins, and
attribute chains from a cell's module (`self.net`, `self.loss`) through the modules' own
attributes, submodules, parameters and buffers; it calls what those give and the pure methods
of tensors and dicts; it stores nothing outside its locals.  The node reruns the body each
time it runs (the eager backend) or at its compile (aot_autograd traces it), so what the body
reads is guarded as the tracer guards a traced read (`guard`: the globals through
op_load_global, each chain through _fake_load_attr).  A module the body uses as a value (calls
it, hands it to functional_call) must be of torch.nn's own classes all the way down (their
forward is library code: what it looks up of torch's modules guarded, `_forward_lookups`),
with no hooks; its attributes, submodules, parameters and buffers are guarded as reads, and
its parameters and buffers are the node's inputs: the node runs the body with the module
reparametrized to them (`reparametrized`), so a compiled graph never holds a parameter as a
constant (DP-SGD updates them in place between calls).  transform_nodes runs the call once
unrecorded and gives up on the node where it drew random numbers, wrote a tensor of the node,
or read tensor data as a Python value."""
from __future__ import annotations

import builtins
import contextlib
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.utils.stateless import _reparametrize_module

from ._bytecode import _instrs
from .classify import _DATA_DEP, _classify
from .grad_hooks import _FORWARD_BRANCHES, _GENERATORS, _NOT_PURE, _PURE_OPS, _pure_method, _torch_function
from .base import Unreplayable
from .guard_kinds import Equals, Is, Keys, Number

# instructions of a body beyond grad_hooks' pure ones: forward branches, loops and the
# comprehensions' builds, the cells of its closure, nested functions it makes
_BODY_OPS = _PURE_OPS | _FORWARD_BRANCHES | frozenset({
    "COPY_FREE_VARS", "LOAD_DEREF", "MAKE_CELL", "LOAD_CLOSURE", "STORE_DEREF", "MAKE_FUNCTION", "BUILD_MAP",
    "BUILD_CONST_KEY_MAP", "MAP_ADD", "LIST_APPEND", "GET_ITER", "FOR_ITER", "END_FOR", "JUMP_BACKWARD",
    "LOAD_GLOBAL", "CONTAINS_OP", "UNPACK_SEQUENCE", "RETURN_CONST", "BUILD_SLICE"})
_DICT_METHODS = frozenset({"items", "values", "keys", "get"})
_META_ATTRS = frozenset({"shape", "ndim", "dtype", "device"})
_BUILTINS = frozenset({"zip", "len", "range", "enumerate", "sum", "tuple", "list", "dict", "abs"})
_PLAIN = (bool, int, float, str, type(None))
_LIBRARY_MODULES = "torch.nn.modules."


def _torch_module(v: object) -> bool:
    return isinstance(v, types.ModuleType) and v.__name__.split(".")[0] == "torch"


def _torch_callable(name: str, v: object) -> bool:
    """A function of torch a body may call through a global or a module of torch: pure by
    name (grad_hooks._torch_function) or torch.func's functional_call."""
    return _torch_function(name, v) or v is torch.func.functional_call


def _plain(v: object) -> bool:
    return type(v) in _PLAIN or type(v) is tuple and all(type(x) in _PLAIN for x in v)


class BodyPlan:
    """What a body reads (to guard) and the modules it uses as values (to reparametrize)."""

    def __init__(self) -> None:
        self.globals: list[tuple[dict, str]] = []
        self.chains: list[tuple[torch.nn.Module, tuple[str, ...]]] = []
        self.used: list[torch.nn.Module] = []
        self.lookups: list[tuple[types.ModuleType, str]] = []   # (a module of torch, the attribute read)


def _attr_of_module(m: torch.nn.Module, name: str) -> tuple[bool, Any]:
    """m.name where it is an instance attribute, a submodule, a parameter or a buffer (not a
    method or property of its class: those run code the walk does not see)."""
    d = m.__dict__
    for where in (d, d.get("_parameters", {}), d.get("_buffers", {}), d.get("_modules", {})):
        if name in where:
            return True, where[name]
    return False, None


def body_plan(fn: types.FunctionType, plan: BodyPlan | None = None, self_obj: torch.nn.Module | None = None) \
        -> BodyPlan | None:
    """The plan of fn's body (module doc); None where it reads or does anything else.
    `self_obj`: fn is the function of a method bound to that module (its first argument)."""
    plan = plan or BodyPlan()
    code = fn.__code__
    if _classify(code) != "user" or code.co_flags & (0x04 | 0x08 | _GENERATORS) or fn.__kwdefaults__:
        return None
    cells: dict[str, Any] = {}
    for n, c in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            cells[n] = c.cell_contents
        except ValueError:
            return None
    writes = [ins[2] for ins in _instrs(code).values() if ins[0] in ("STORE_DEREF", "DELETE_DEREF", "STORE_FAST",
                                                                     "DELETE_FAST")]
    if any(n in code.co_freevars for n in writes):
        return None
    own = None
    if self_obj is not None:
        own = code.co_varnames[0] if code.co_argcount else None
        if own is None or own in writes:
            return None
        if own in code.co_cellvars:   # (read by a comprehension or lambda it makes)
            cells[own] = self_obj
    return plan if _walk(code, fn.__globals__, cells, plan, own, self_obj) else None


def _walk(code: types.CodeType, g: dict, cells: dict, plan: BodyPlan, own: str | None = None,
          self_obj: Any = None) -> bool:
    held: Any = None   # a module of torch or an nn.Module the previous instruction pushed, for a chain
    chain: tuple[Any, tuple[str, ...]] | None = None
    last_const: Any = None
    for op, _arg, argval, _depth in _instrs(code).values():
        if op in ("LOAD_ATTR", "LOAD_METHOD") and held is not None:
            root, names = chain
            if isinstance(held, torch.nn.Module):
                ok, v = _attr_of_module(held, argval)
                if not ok:
                    return False
                chain = (root, names + (argval,))
                if isinstance(v, torch.nn.Module):
                    held = v
                    continue
                if isinstance(v, torch.Tensor):
                    plan.used.append(held)   # (read live: the node's inputs through reparametrization)
                elif not _plain(v):
                    return False
                plan.chains.append(chain)
            else:
                v = getattr(held, argval, None)
                plan.lookups.append((held, argval))
                if _torch_module(v):
                    held = v
                    continue
                if not _torch_callable(argval, v):
                    return False
            held = chain = None
            continue
        if isinstance(held, torch.nn.Module):
            plan.used.append(held)   # (a module handed on or called)
            if chain[1]:
                plan.chains.append(chain)
        held = chain = None
        if op == "LOAD_GLOBAL":
            if argval in g:
                v = g[argval]
                if isinstance(v, torch.nn.Module):   # (a model the program's module holds: sourced by its read)
                    plan.globals.append((g, argval))
                    held, chain = v, (v, ())
                    continue
                if not (_torch_module(v) or _torch_callable(argval, v)):
                    return False
            elif argval not in _BUILTINS:
                return False
            else:
                v = None
            plan.globals.append((g, argval))
            if _torch_module(v):
                held = v
                chain = (v, ())
        elif op in ("LOAD_FAST", "LOAD_FAST_CHECK") and own is not None and argval == own:
            held, chain = self_obj, (self_obj, ())
        elif op == "LOAD_DEREF" and argval in cells:
            v = cells[argval]
            if isinstance(v, torch.nn.Module):
                held, chain = v, (v, ())
            elif isinstance(v, types.FunctionType) and v.__code__ in code.co_consts:
                return False   # (a recursive closure)
        elif op == "MAKE_FUNCTION":
            if not isinstance(last_const, types.CodeType) or not _walk(last_const, g, cells, plan):
                return False
        elif op in ("LOAD_ATTR", "LOAD_METHOD"):
            if argval in _NOT_PURE or argval in _DATA_DEP or \
                    not (_pure_method(argval) or argval in _DICT_METHODS or argval in _META_ATTRS):
                return False
        elif op == "LOAD_CONST":
            if not (_plain(argval) or argval is Ellipsis or isinstance(argval, types.CodeType) or
                    type(argval) is tuple and all(_plain(x) or x is Ellipsis for x in argval)):
                return False
        elif op not in _BODY_OPS:
            return False
        last_const = argval if op == "LOAD_CONST" else None
    return held is None


def library_subtree(m: torch.nn.Module) -> bool:
    """m and every module under it are of torch.nn's own classes, without hooks."""
    mm = torch.nn.modules.module
    if mm._has_any_global_hook():
        return False
    for s in m.modules():
        if not type(s).__module__.startswith(_LIBRARY_MODULES) or s._forward_hooks or s._forward_pre_hooks or \
                s._backward_hooks or s._backward_pre_hooks or "forward" in s.__dict__:
            return False
        if len(list(s.named_parameters(remove_duplicate=False))) != len(list(s.named_parameters())):
            return False   # (tied weights: one name would keep the parameter itself)
        if any(p is not None and (p.is_meta or type(p) is not torch.nn.Parameter)
               for p in s._parameters.values()) or \
                any(b is not None and (b.is_meta or type(b) is not torch.Tensor) for b in s._buffers.values()):
            return False
    return True


def _forward_lookups(rec: Any, m: torch.nn.Module) -> None:
    """Guards what a library module's forward looks up of torch's modules (`F.linear`)."""
    fn = type(m).forward
    if type(fn) is not types.FunctionType:
        return
    held = None
    for op, _arg, argval, _depth in _instrs(fn.__code__).values():
        if op == "LOAD_GLOBAL":
            v = fn.__globals__.get(argval)
            if _torch_module(v):
                rec.read(f"{rec.const(fn.__globals__)}[{argval!r}]", argval, v, group=(fn.__globals__,))
                held = v
                continue
        elif op in ("LOAD_ATTR", "LOAD_METHOD") and held is not None and hasattr(held, argval):
            rec.read(f"{rec.const(held)}.{argval}", f"{held.__name__}.{argval}", getattr(held, argval))
        held = None


def guard(rec: Any, plan: BodyPlan) -> None:
    """Guards what the plan's body reads (module doc), as the tracer would guard its reads, and
    each value it reads of a module pinned by a guard of its own (`_pin`).  Unreplayable where
    a read is one the replay cannot hold fixed."""
    for g, name in plan.globals:
        frame = types.SimpleNamespace(f_globals=g, f_builtins=builtins.__dict__)
        rec.op_load_global(frame, None, name)
    for mod, name in plan.lookups:
        rec.read(f"{rec.const(mod)}.{name}", f"{mod.__name__}.{name}", getattr(mod, name))
    for root, names in plan.chains:
        if not held_source(rec.src.get(id(root))):
            raise Unreplayable(f"a {type(root).__name__} a torch.func transform reads has no source")
        o = root
        for n in names:
            _pin(rec, o, n)
            o = getattr(o, n)
    for m in unique(plan.used):
        _guard_subtree(rec, m)


def unique(ms: list) -> list:
    out: list = []
    for m in ms:
        if not any(m is x for x in out):
            out.append(m)
    return out


def constant_cell(maker: types.CodeType | None, code: types.CodeType, name: str, v: object) -> bool:
    """The cell `name` of a function of `code`, made by the code `maker` (the frame calling the
    transform), holds the number v whatever the call: every store of it in `maker` stores the
    literal v (`cls = 1`), so the node may hold v as a constant (a number computed by the
    call, a counter, a loop variable: not)."""
    if maker is None or code not in maker.co_consts or name not in maker.co_cellvars:
        return False
    nargs = maker.co_argcount + maker.co_kwonlyargcount + bool(maker.co_flags & 0x04) + bool(maker.co_flags & 0x08)
    if name in maker.co_varnames[:nargs]:
        return False   # (an argument: the cell starts with the caller's value)
    ins = list(_instrs(maker).values())
    stores = [i for i, x in enumerate(ins) if x[0] in ("STORE_DEREF", "DELETE_DEREF") and x[2] == name]
    return bool(stores) and all(i > 0 and ins[i][0] == "STORE_DEREF" and ins[i - 1][0] == "LOAD_CONST" and
                                type(ins[i - 1][2]) is type(v) and ins[i - 1][2] == v for i in stores)


def held_source(s: tuple | None) -> bool:
    """A source (rec.src's entry) of an object a node may hold: one the replay reads where the
    recording did, not an opaque result nor a module the call made ("fresh": the replay makes
    another, whose state the guards on the recording's would not check)."""
    return s is not None and s[2] not in ("opaque", "fresh")


def _pinned(v: object) -> bool:
    """A value `_pin` guards by value (tuples as the tracer guards them: of ints and strings)."""
    return type(v) in _PLAIN or type(v) is tuple and len(v) <= 8 and all(type(x) in (int, str) for x in v)


def _pin(rec: Any, m: torch.nn.Module, name: str) -> None:
    """m.name read as the tracer reads it (_fake_load_attr: sourced, guarded), and, where it is
    a value of m's instance dict, pinned by a guard of its own: the node reads it when it runs
    (or when its graph compiles), so a number the tracer would follow as it changes, or one
    the call wrote before (the replay writes at its end), cannot be held."""
    key = (id(m), name)
    if key in rec.dirty or key in getattr(rec, "counters", ()) or \
            any(k[0] == id(m) and k[1] in (name, "__dict__") for k in getattr(rec, "flow_stores", None) or ()):
        raise Unreplayable(f"{type(m).__name__}.{name}, written by the call, read by a torch.func transform")
    rec._fake_load_attr(m, name)
    d = m.__dict__
    if name not in d:
        v = getattr(m, name)
        s = rec.src.get(id(v))
        if v is not None and not held_source(s):
            raise Unreplayable(f"{type(m).__name__}.{name} read by a torch.func transform has no source")
        return
    v, e, pretty = d[name], f"{rec.const(d)}[{name!r}]", f"{type(m).__name__}.{name}"
    if not _pinned(v):
        raise Unreplayable(f"{pretty} read by a torch.func transform")
    if v is None or type(v) is bool:
        rec.guard(Is(e, pretty, v, repr(v)))
    elif type(v) in (int, float):
        rec.guard(Number(e, pretty, v, type(v)))
    else:
        rec.guard(Equals(e, pretty, v, exact=type(v)))


_MODULE_KEYS = frozenset(torch.nn.Module().__dict__) - {"training"}


def _guard_subtree(rec: Any, m: torch.nn.Module) -> None:
    """m and every module under it: the same objects (identity), the same registries (keys of
    their parameters, buffers and submodules), their hooks and forward (_guard_module_call),
    what their forward looks up of torch's modules, and each value of their instance dicts
    (`_pin`): a module holding anything else is not one a node reads."""
    todo = [m]
    while todo:
        mod = todo.pop()
        s = rec.src.get(id(mod))
        if not held_source(s):
            raise Unreplayable(f"a {type(mod).__name__} a torch.func transform uses has no source")
        rec.guard(Is(s[0], s[1], mod, "the same module (id)"))
        rec._guard_module_call(mod, s[1])
        _forward_lookups(rec, mod)
        d = mod.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            rec.guard(Is(f"{rec.const(d)}[{store!r}]", f"{s[1]}.{store}", d[store], "the same dict"))
            rec.guard(Keys(rec.const(d[store]), f"{s[1]}.{store}", tuple(d[store])))
        for k in d:
            if k not in _MODULE_KEYS:
                _pin(rec, mod, k)
        for k in list(mod._parameters) + list(mod._buffers) + list(mod._modules):
            _pin(rec, mod, k)
        todo.extend(sub for sub in mod._modules.values() if sub is not None)


def module_tensors(m: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The parameters and buffers of m's subtree by name, each object once."""
    return [(n, t) for n, t in list(m.named_parameters()) + list(m.named_buffers())]


def reparametrized(call: Callable, mods: list) -> Callable:
    """call run with each module of `mods` ((module, names, indices of the node's inputs))
    reparametrized to the tensors the node gets."""
    def run(*vals: Any) -> Any:
        with contextlib.ExitStack() as st:
            for m, names, idx in mods:
                st.enter_context(_reparametrize_module(m, {n: vals[i] for n, i in zip(names, idx)}))
            return call(*vals)
    return run


FAILED = object()
WROTE = "wrote"


def _rng_states() -> list[torch.Tensor]:
    out = [torch.random.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out.append(torch.cuda.get_rng_state())
    return out


def _set_rng_states(states: list[torch.Tensor]) -> None:
    torch.random.set_rng_state(states[0])
    if len(states) > 1:
        torch.cuda.set_rng_state(states[1])


def watched_run(rec: Any, f: Callable, args: list, tensors: list) -> tuple[Any, str | None]:
    """f(*args) run once unrecorded, watched: (FAILED, None) where it raised, drew from torch's
    generators (their state put back: the call then runs as an uncapturable one and draws what
    eager draws) or read tensor data as a Python value (a node running it again would not
    compute the same); (result, WROTE) where it wrote one of `tensors` (the node's inputs: not
    undone, so not run again); else (result, None)."""
    versions = [t._version for t in tensors]
    rng = _rng_states()
    watch = rec.ext_watch = []
    rec.ext_depth += 1
    try:
        res = f(*args)
    except Exception:  # noqa: BLE001  (the call runs as before, and raises there)
        return FAILED, None
    finally:
        rec.ext_depth -= 1
        rec.ext_watch = None
    if [t._version for t in tensors] != versions:
        return res, WROTE
    if not all(torch.equal(a, b) for a, b in zip(rng, _rng_states())):
        _set_rng_states(rng)
        return FAILED, None
    return (FAILED, None) if watch else (res, None)


def writes_buffers(m: torch.nn.Module) -> bool:
    """A module in training mode with buffers (batch norm's running statistics): its forward
    may write them (checked before the run: a write is not undone)."""
    return any(s.training and any(b is not None for b in s._buffers.values()) for s in m.modules())
