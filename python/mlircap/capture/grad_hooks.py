"""Gradient hooks the graph registers itself (`h.register_hook(fn)`, as Dynamo's
`register_hook` higher-order op): on a tensor the graph computed, with a hook the call made
(a lambda or nested function of the traced code, from a code constant: no closure, no
defaults, so every call makes the same function) whose body is tensor arithmetic on the
gradient alone (`lambda g: g.clamp(-c, c)` with literal bounds, `g * 0.5`, `g.neg()`), and a
handle the program drops.  The graph holds a node that registers the hook on its tensor and
returns that tensor; the eager backend runs it as it is, aot_autograd traces the hook into
the backward graph (which is why the body must be pure tensor code of its argument: anything
that reads or writes the program's state would run once, at compile time).  Anything else
stays a step between graphs.

Custom autograd Functions likewise (`GradReverse.apply(f, alpha)`, as Dynamo traces their
forward and backward): where forward and backward are pure tensor code (their arguments,
constants, tensor methods, `ctx.save_for_backward` / `saved_tensors` and attributes the
forward stores on ctx), the graph holds `Fn.apply(...)` as one node: autograd attaches the
Function's backward when the graph runs (eager backend), aot_autograd traces both."""
from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from ._bytecode import _instrs, _order
from .base import Unreplayable
from .classify import _DATA_DEP, _classify
from .draws import _draws_rng
from .frame_hook import _E
from .typeinfo import _mro_lookup

# instructions of a hook body that only move values and compute with them (no jumps: a
# branch on the gradient would be data-dependent; no globals, cells, imports or stores
# outside its own locals)
_PURE_OPS = frozenset({
    "RESUME", "NOP", "CACHE", "PUSH_NULL", "PRECALL", "CALL", "KW_NAMES", "LOAD_FAST", "LOAD_FAST_CHECK",
    "STORE_FAST", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST", "POP_TOP", "COPY", "SWAP", "BINARY_OP",
    "BINARY_SUBSCR", "COMPARE_OP", "UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "BUILD_TUPLE",
    "BUILD_LIST", "BUILD_SLICE", "LOAD_METHOD", "LOAD_ATTR", "UNPACK_SEQUENCE"})
# Tensor methods that touch autograd, storage or devices, or give Python values of the data
_NOT_PURE = frozenset({"register_hook", "register_post_accumulate_grad_hook", "backward", "retain_grad",
                       "detach", "requires_grad_", "data_ptr", "storage", "untyped_storage", "set_",
                       "share_memory_", "record_stream", "pin_memory", "to", "cpu", "cuda", "tolist",
                       "numpy", "item", "apply_", "map_", "map2_", "register_hook_op"})
_CONST_TYPES = (int, float, bool, type(None), str)
_GENERATORS = 0x20 | 0x80 | 0x200   # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


def pure_grad_hook(hook: object, made_by: types.CodeType) -> tuple[str, ...] | None:
    """The Tensor attribute names the hook's body looks up (each to guard against
    monkeypatching), where `hook` is a function the code `made_by` made and its body is
    pure tensor code of the gradient; None otherwise."""
    if type(hook) is not types.FunctionType or hook.__closure__ or hook.__defaults__ or hook.__kwdefaults__:
        return None
    code = hook.__code__
    if code not in made_by.co_consts or code.co_argcount != 1 or code.co_kwonlyargcount or \
            code.co_flags & (0x04 | 0x08 | _GENERATORS) or code.co_freevars or code.co_cellvars:
        return None
    names: list[str] = []
    for op, _arg, argval, _depth in _instrs(code).values():
        if op not in _PURE_OPS:
            return None
        if op == "LOAD_CONST" and not (type(argval) in _CONST_TYPES or
                                       type(argval) is tuple and all(type(x) in _CONST_TYPES for x in argval)):
            return None
        if op in ("LOAD_METHOD", "LOAD_ATTR"):
            if not _pure_method(argval):
                return None
            names.append(argval)
    return tuple(dict.fromkeys(names))


def _pure_body(fn: object, ctx_names: frozenset, stores: bool, lookups: list | None = None) -> set[str] | None:
    """The names a staticmethod's body looks up (tensor methods, ctx's), where it is pure
    tensor code of its arguments (`stores`: attributes written on its first argument, ctx);
    None otherwise.  With `lookups` (an autograd Function's forward or backward), the body may
    also call torch's own pure functions through a global module of torch (`torch.where`,
    `F.softplus`, `torch.nn.functional.relu`: each lookup appended as (holder, key, value) to
    guard), convert with `.to(...)`, and branch forward on values of its arguments
    (`if ctx.needs_input_grad[0]`, `x if c is None else ...`): no loop, and a branch on tensor
    data raises where aot_autograd traces it (the graph then runs as it is)."""
    if type(fn) is not types.FunctionType or fn.__closure__ or fn.__kwdefaults__:
        return None
    code = fn.__code__
    if code.co_argcount < 1 or code.co_flags & (0x08 | _GENERATORS) or code.co_freevars or code.co_cellvars:
        return None
    names: set[str] = set()
    prev: tuple = ()
    held: object = None   # the torch module the previous instruction pushed (lookups only)
    branches = writes = False
    fresh = 0   # a backward's `torch.zeros_like(g)`: 1 its arguments being loaded, 2 its result on top
    for op, _arg, argval, _depth in _instrs(code).values():
        if fresh == 2 and op == "LOAD_METHOD" and not stores and _inplace_method(argval):
            # `torch.zeros_like(g).scatter_(-1, idx, g)`: an in-place method of a tensor the
            # backward just made (no argument, saved tensor or view of one), as its functional form
            fresh = 0
            prev = (op, _arg, argval)
            continue
        fresh = 2 if fresh == 1 and op == "CALL" else \
            fresh if fresh == 1 and op in ("LOAD_FAST", "LOAD_CONST", "PRECALL") else 0
        if lookups is not None and op == "LOAD_GLOBAL":
            mod = fn.__globals__.get(argval, _NO_GLOBAL)
            if not _torch_module(mod):
                return None
            lookups.append((fn.__globals__, argval, mod))
            held = mod
        elif held is not None:
            if op not in ("LOAD_ATTR", "LOAD_METHOD"):
                return None
            obj = getattr(held, argval, None)
            lookups.append((held, argval, obj))
            if _torch_module(obj):
                held = obj
                continue
            if not _torch_function(argval, obj):
                return None
            held = None
            fresh = 1 if not stores and argval in _FRESH_FACTORIES else 0
        elif op == "STORE_ATTR" and stores and prev[:1] == ("LOAD_FAST",) and prev[2] == code.co_varnames[0]:
            names.add(argval)
        elif lookups is not None and (op in _FORWARD_BRANCHES or op in ("LOAD_METHOD", "LOAD_ATTR") and
                                      argval in _FUNCTION_METHODS):
            branches = branches or op in _FORWARD_BRANCHES
        elif stores and lookups is not None and op == "LOAD_METHOD" and _inplace_method(argval):
            writes = True   # (`torch.zeros_like(x).scatter_(...)`: see _function_node's check)
        elif op not in _PURE_OPS:
            return None
        elif op == "LOAD_CONST" and not (_const(argval, lookups is not None) or type(argval) is tuple and
                                         all(_const(x, lookups is not None) for x in argval)):
            return None
        elif op in ("LOAD_METHOD", "LOAD_ATTR") and not (argval in ctx_names or _pure_method(argval)):
            names.add(f"?{argval}")
        prev = (op, _arg, argval)
    if writes:
        if branches:
            return None   # (which tensor an in-place op writes could follow tensor data)
        names.add(_WRITES)
    return None if held is not None else names


# what _pure_body's names hold where a forward calls in-place tensor methods
_WRITES = "!writes"
# torch's functions making a new tensor of their arguments' shape alone (a backward may write it in place)
_FRESH_FACTORIES = frozenset({"zeros_like", "ones_like", "empty_like", "full_like"})


def _inplace_method(name: object) -> bool:
    """`name` is an in-place tensor method whose out-of-place form is pure (`scatter_`,
    `masked_fill_`, `add_`, `zero_`)."""
    if type(name) is not str or not name.endswith("_") or name.endswith("__") or name.startswith("_") or \
            name in _NOT_PURE:
        return False
    base = name[:-1]
    if base in _NOT_PURE or base in _DATA_DEP or _draws_rng(base) or _draws_rng(name) or \
            base in ("set", "resize", "resize_as", "share_memory", "requires_grad", "detach"):
        return False
    raw = _mro_lookup(torch.Tensor, name)[1]
    return isinstance(raw, (types.MethodDescriptorType, types.WrapperDescriptorType, types.BuiltinFunctionType)) and \
        (base in ("zero", "fill", "copy") or _pure_method(base))


def _const(v: object, ellipsis: bool) -> bool:
    return type(v) in _CONST_TYPES or ellipsis and v is Ellipsis   # (`g[..., None]`)


_NO_GLOBAL = object()
# forward branches (no loops) an autograd Function's body may take on its arguments' values
_FORWARD_BRANCHES = frozenset({
    "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "JUMP_FORWARD", "IS_OP",
    # (3.12: conditional jumps are forward only)
    "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"})
# Tensor methods an autograd Function's body may call beyond the pure ones, and the metadata
# it may read (guarded as every graph input's)
_FUNCTION_METHODS = frozenset({"to", "type_as", "dtype", "shape", "ndim", "device", "is_floating_point"})


def _torch_module(obj: object) -> bool:
    return isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] == "torch"


_CTX_NAMES = frozenset({"save_for_backward", "saved_tensors", "needs_input_grad", "mark_non_differentiable",
                        "set_materialize_grads"})
_ONCE_DIFFERENTIABLE = torch.autograd.function.once_differentiable(lambda ctx: None).__code__


def pure_autograd_function(cls: object) -> tuple[list[tuple[object, str, object]], bool] | None:
    """Where `cls` is a direct torch.autograd.Function subclass whose forward (with ctx) and
    backward (also one made `@once_differentiable`) are pure tensor code, and attributes the
    backward reads off ctx are ones the forward stored: the lookups of torch's functions
    their bodies make, each (holder, key, value) to guard (`_pure_body`), and whether the
    forward (then one without branches) calls in-place tensor methods; None otherwise."""
    if not isinstance(cls, type) or cls.__mro__[1] is not torch.autograd.Function or \
            any(n in cls.__dict__ for n in ("setup_context", "vjp", "apply", "__call__", "jvp")):
        return None
    fw, bw = cls.__dict__.get("forward"), cls.__dict__.get("backward")
    if type(fw) is not staticmethod or type(bw) is not staticmethod:
        return None
    lookups: list[tuple[object, str, object]] = []
    stored = _pure_body(fw.__func__, _CTX_NAMES, True, lookups)
    if stored is None:
        return None
    ctx_attrs = frozenset(n for n in stored if not n.startswith(("?", "!")))
    if any(n[1:] not in ctx_attrs for n in stored if n.startswith("?")):
        return None   # the forward reads an attribute it did not store on ctx
    bf = bw.__func__
    if type(bf) is types.FunctionType and bf.__code__ is _ONCE_DIFFERENTIABLE:
        # (once_differentiable's wrapper: runs the function it holds under no_grad)
        inner = bf.__closure__[0].cell_contents if bf.__closure__ and len(bf.__closure__) == 1 else None
        if inner is not getattr(bf, "__wrapped__", None):
            return None
        bf = inner
    read = _pure_body(bf, _CTX_NAMES | ctx_attrs, False, lookups)
    return (lookups, _WRITES in stored) if read is not None and not read else None


# metadata a vmapped body may read for a branch (per-example shapes: its inputs' shapes are
# guarded, its dims constants)
_SHAPE_ATTRS = frozenset({"shape", "ndim"})


def pure_mapped_function(fn: object, shape_branches: bool = False) -> list[tuple[str, object, str | None]] | None:
    """For a function `torch.vmap` maps (a plain function or a method's function): where its
    body is pure tensor code of its arguments (also torch's own functions: `torch.tanh`,
    `F.relu`, reached through a global module of torch), the lookups to guard, each (global
    name, the module it holds, attribute of that module or None); None otherwise."""
    if type(fn) is not types.FunctionType or fn.__closure__ or fn.__kwdefaults__ or \
            _classify(fn.__code__) != "user":
        return None
    code = fn.__code__
    if code.co_flags & (0x04 | 0x08 | _GENERATORS) or code.co_freevars or code.co_cellvars:
        return None
    return torch_lookups(fn, shape_branches=shape_branches)


def torch_lookups(fn: types.FunctionType, cell_ops: frozenset = frozenset(),
                  shape_branches: bool = False) -> list[tuple[str, object, str | None]] | None:
    """The walk over `fn`'s instructions of pure_mapped_function (and transform_nodes'
    pure_closure_lookups, whose `cell_ops` read the closure's cells): the lookups of torch's
    modules to guard, each (global name, module, attribute or None); None where an instruction
    is not pure tensor code.  `shape_branches`: forward branches and reads of a tensor's
    `shape` / `ndim` are allowed too (a vmapped body: its caller checks that no branch read
    tensor data, `_SHAPE_ATTRS`)."""
    code = fn.__code__
    out: list[tuple[str, object, str | None]] = []
    held: tuple[str, object] | None = None   # (global, module) the previous instruction pushed
    for op, _arg, argval, _depth in _instrs(code).values():
        if op == "LOAD_GLOBAL":
            mod = fn.__globals__.get(argval)
            if not isinstance(mod, types.ModuleType) or not mod.__name__.split(".")[0] == "torch":
                return None
            out.append((argval, mod, None))
            held = (argval, mod)
            continue
        if op in ("LOAD_METHOD", "LOAD_ATTR") and held is not None:
            obj = getattr(held[1], argval, None)
            if not _torch_function(argval, obj):
                return None
            out.append((held[0], held[1], argval))
            held = None
            continue
        held = None
        if op in cell_ops or shape_branches and (op in _FORWARD_BRANCHES or op in ("LOAD_METHOD", "LOAD_ATTR") and
                                                 argval in _SHAPE_ATTRS):
            continue
        if op not in _PURE_OPS or op == "UNPACK_SEQUENCE":
            return None
        if op == "LOAD_CONST" and not (type(argval) in _CONST_TYPES or
                                       type(argval) is tuple and all(type(x) in _CONST_TYPES for x in argval)):
            return None
        if op in ("LOAD_METHOD", "LOAD_ATTR") and not _pure_method(argval):
            return None
    return out


def guard_lookups(rec: Any, fn: types.FunctionType, lookups: list[tuple[str, object, str | None]]) -> None:
    """Guards what torch_lookups found: each global name still holds its torch module, and each
    attribute read of it the same function."""
    for name, mod, attr in lookups:
        g = fn.__globals__
        rec.read(f"{rec.const(g)}[{name!r}]", name, mod, group=(g,))
        if attr is not None:
            rec.read(f"{rec.const(mod)}.{attr}", f"{name}.{attr}", getattr(mod, attr))

def _torch_function(name: str, obj: object) -> bool:
    """A function of a torch module that computes from its operands alone."""
    if name.startswith("_") or name.endswith("_") or name in _NOT_PURE or name in _DATA_DEP or \
            _draws_rng(name):
        return False
    return isinstance(obj, (types.BuiltinFunctionType, types.FunctionType)) and \
        (getattr(obj, "__module__", None) or "torch").startswith("torch")


def _pure_method(name: object) -> bool:
    if type(name) is not str or name in _NOT_PURE or name in _DATA_DEP or name.endswith("_") and \
            not name.endswith("__"):
        return False
    if name.startswith("_") and name not in _DUNDER_ARITH:
        return False
    raw = _mro_lookup(torch.Tensor, name)[1]
    return isinstance(raw, (types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                            types.BuiltinFunctionType))


_DUNDER_ARITH = frozenset(f"__{n}__" for n in (
    "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "neg", "pos", "abs", "pow", "rpow",
    "getitem", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "xor", "invert", "matmul", "rmatmul"))


def hook_target(hook: Callable) -> Callable:
    """The graph node's callable: registers `hook` on its tensor, returns that tensor."""
    def register_grad_hook(t: torch.Tensor) -> torch.Tensor:
        t.register_hook(hook)
        return t
    return register_grad_hook


def graph_arguments(rec: object, args: list, consts: tuple) -> bool:
    """Whether every tensor of `args` is one the graph of recorder `rec` holds and every
    other argument is None or of a type in `consts` (a call held as one node)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            e = rec.env.get(id(a))
            if not (e is not None and e[0] is a or id(a) in rec.src):
                return False
        elif not (a is None or type(a) in consts):
            return False
    return True


class _GradHookMixin:
    """For `_Recorder` (through `_GraphMixin`): the graph node of a gradient hook."""

    def _grad_hook_node(self, args: tuple, kwargs: dict) -> bool:
        """`h.register_hook(fn)` held by the graph as a node (grad_hooks.py): h computed by
        the graph, fn a pure gradient hook the calling frame made, the handle dropped
        (POP_TOP next).  False: the call is a step between graphs, as before."""
        t = args[0] if args else None
        hook = args[1] if len(args) == 2 and not kwargs else kwargs.get("hook") if len(args) == 1 else None
        e = self.env.get(id(t))
        fr = _dropping_user_frame()
        if e is None or e[0] is not t or id(t) in self.src or fr is None or self.np_env:
            return False
        if t.grad_fn is None:
            # (a leaf, `x = x.clone().requires_grad_()` made in the call: the tensor the graph returns
            # stood in for it, a non-leaf whose history is the graph's autograd node; a second
            # backward through it in a loop walked into that node, freed by the first)
            return False
        names = pure_grad_hook(hook, fr.f_code)
        if names is None:
            return False
        try:
            self._record(hook_target(hook), "register_hook", (t,), {}, t)
        except Unreplayable:
            return False
        self.__dict__.setdefault("graph_hooked", {})[id(t)] = t
        for n in names:   # what the hook's lookups resolve to, as traced code's are guarded
            self._class_guard(torch.Tensor, n, _mro_lookup(torch.Tensor, n)[1], f"Tensor.{n}")
        return True


    def _retains_hooked_grad(self, name: str, args: tuple) -> bool:
        """`t.retain_grad()` of a tensor whose gradient hook the graph holds: the hook
        runs inside the graph's backward, after the tensor the graph returns, so .grad would
        hold the gradient before the hook, where eager's holds it after (retains_grad hooks
        run last).  Such a call makes capture give up."""
        t = args[0] if args else None
        if name != "retain_grad" or not isinstance(t, torch.Tensor):
            return False
        if self.__dict__.get("graph_hooked", {}).get(id(t)) is not t:
            return False
        self.unreplayable = self.unreplayable or "retain_grad() of a tensor whose gradient hook the graph holds"
        return True

    def _function_node(self, frame: types.FrameType, cls: type, args: list, kwargs: dict) -> bool:
        """`cls.apply(*args)` about to run here held by the graph as one node (see the module's
        docstring): its tensor arguments the graph's, the others constants, none a followed
        number, or a followed float that it uses as it uses a 0-d float64 tensor, which then
        is a graph input (`GradReverse.apply(h, alpha)` with a scheduled alpha: one variant for
        every alpha, number_calls.py).  The call then runs untraced and
        unrecorded; its result is the node's."""
        # (another followed number handed to it is guarded by value: flows.py, as for any call
        # that does not take it as an expression)
        pure = None if kwargs or self.np_env else pure_autograd_function(cls)
        if pure is None:
            return False
        lookups, writes = pure
        versions = _versions(args) if writes else []
        if versions is None:
            return False
        fc = self.flow_call
        if fc is not None and fc[0] is frame and fc[1] == frame.f_lasti and all(k < 0 for k in fc[3]) and \
                graph_arguments(self, args, _CONST_TYPES):
            args2 = self._number_tensor_apply(cls, args, fc[2])
            if args2 is not None:
                args = args2
                self._flow_call_done(fc)
        if not graph_arguments(self, args, _CONST_TYPES):
            return False
        target = _APPLY_TARGETS.setdefault(cls, cls.apply)
        for holder, key, value in lookups:   # torch's functions its bodies call, as traced code's reads
            if isinstance(holder, dict):
                self.read(f"{self.const(holder)}[{key!r}]", key, value, group=(holder,))
            else:
                self.read(f"{self.const(holder)}.{key}", f"{holder.__name__}.{key}", value)
        self.ext_depth += 1   # (its forward's ops are not the program's: the node stands for them)

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            if any(t._version != v for t, v in versions):
                # its forward wrote an argument (or a view of one) in place: the node would
                # hide that write from the graph around it
                self.unreplayable = self.unreplayable or \
                    f"{cls.__qualname__}.forward wrote its argument in place (an in-place tensor method)"
                return
            res = _E.peek(fr, 0)
            # (a tuple of tensors, `return y, idx` with idx marked non-differentiable, is the
            # node's tuple: each element a getitem of it)
            if not (isinstance(res, torch.Tensor) or type(res) is tuple and res and
                    all(type(r) is torch.Tensor for r in res)):
                self.unreplayable = self.unreplayable or f"{cls.__qualname__}.apply returned no tensor"
                return
            try:
                self._record(target, "apply", tuple(args), {}, res)
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or f"{e} (in {cls.__qualname__}.apply)"
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish
        return True


def _versions(args: list) -> list[tuple[torch.Tensor, int]] | None:
    """The version counters of the tensor arguments of a Function whose forward calls
    in-place methods (each checked after the call: it wrote none of them, nor a view of one);
    None where one has no counter (an inference tensor)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.is_inference():
                return None
            out.append((a, a._version))
    return out


_APPLY_TARGETS: dict[type, Callable] = {}
_REGISTER_HOOK = torch.Tensor.register_hook


def _dropping_user_frame() -> types.FrameType | None:
    """The innermost user frame, where the call it is at drops its result (POP_TOP next)."""
    f = sys._getframe(2)
    while f is not None and _classify(f.f_code) != "user":
        f = f.f_back
    if f is None:
        return None
    ins = _instrs(f.f_code)
    offs, pos = _order(f.f_code)
    i = pos.get(f.f_lasti)
    if i is None or ins[f.f_lasti][0] != "CALL" or i + 1 >= len(offs):
        return None
    return f if ins[offs[i + 1]][0] == "POP_TOP" else None
