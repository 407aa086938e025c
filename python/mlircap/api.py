"""`mlircap.compile`: the user-facing entry point."""
from __future__ import annotations

import functools

import torch

from . import config
from ._wrap import module_attr
from .backend import CompiledGraph, Options, make_backend


class Compiled:
    """A compiled function or module. Call it like the original.

    ``.graphs`` lists every graph compiled so far (one per captured region and
    recompile); ``.ir(stage)`` returns that stage's IR for all of them
    (stages: fx, torch, linalg, fused, llvm, ptx).

    The wrapper of an ``nn.Module`` behaves like the module (as torch.compile's
    OptimizedModule does): attribute reads, writes and deletes reach the module, and
    its methods that return the module itself (``eval()``, ``train()``, ``to()``,
    ``cuda()``, ``float()``, ``requires_grad_()``, ...) return this wrapper, so the
    compiled path is kept.
    """

    # attributes that live on the wrapper itself; everything else of a module wrapper
    # is the module's
    _OWN_ATTRS = frozenset({"_fn", "_options", "_is_module", "graphs", "_compiled", "_call", "capture", "_limits"})

    def __new__(cls, fn=None, *args, **kwargs):
        # the wrapper of a module is itself an nn.Module (CompiledModule)
        if cls is Compiled and isinstance(fn, torch.nn.Module):
            cls = CompiledModule
        return object.__new__(cls)

    def __init__(self, fn, options: Options, capture: str = "mlircap", cache_limit: int = 8,
                 break_limit: int = 64):
        object.__setattr__(self, "_is_module", isinstance(fn, torch.nn.Module))
        self._fn = fn
        self._options = options
        self._limits = (cache_limit, break_limit)
        self.graphs: list[CompiledGraph] = []
        backend = make_backend(options, self.graphs, eager_first=capture == "dynamo")
        if capture == "mlircap":
            # mlircap's own bytecode capture (python/mlircap/capture): guards,
            # graph breaks that resume, side effects replayed.
            from .capture import capture as bytecode_capture

            self._compiled = bytecode_capture(fn, backend, cache_limit=cache_limit, strict=options.strict,
                                              break_limit=break_limit)
        elif capture == "dynamo":
            # torch's Dynamo as the capture front. dynamic=False: mlircap
            # compiles static shapes; a new shape is a recompile.
            self._compiled = torch.compile(fn, backend=backend, dynamic=False)
        else:
            raise ValueError(f"unknown capture front {capture!r} (mlircap or dynamo)")
        self.capture = capture
        # what a call runs: for mlircap's capture its _Captured itself (the wrapper
        # capture() returns only forwards to it)
        self._call = getattr(self._compiled, "_mlircap_capture", self._compiled)
        if not self._is_module:
            # the function's name and docstring; not its __dict__, which for a function
            # compiled again (mlircap.compile(mlircap.compile(f))) is the inner wrapper's own
            # state (its _fn, _call, graphs) and replaced this wrapper's
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __reduce_ex__(self, protocol):
        # copy.deepcopy / pickle: a new wrapper, compiled with the same options, of the
        # (deep-copied / unpickled) module or function, with a cache of its own (as
        # torch.compile's OptimizedModule); copy.copy: a new wrapper of the same module.
        # A function compiled as a decorator pickles by its global name.
        d = self.__dict__
        if not d["_is_module"]:
            import sys

            mod = sys.modules.get(d.get("__module__") or "")
            obj = mod
            for part in (d.get("__qualname__") or "<>").split("."):
                obj = getattr(obj, part, None)
            if obj is self:
                return d["__qualname__"]
        return _rebuild, (d["_fn"], d["_options"], d["capture"], *d["_limits"])

    def explain(self):
        """Graphs, breaks with the user's file:line, guards, recompile reasons
        (mlircap capture only)."""
        if self.capture != "mlircap":
            raise RuntimeError("explain() needs capture='mlircap'; for Dynamo use torch._dynamo.explain")
        return self._compiled.explain()

    def ir(self, stage: str = "linalg") -> str:
        parts = []
        for g in self.graphs:
            parts.append(f"// ===== {g.name} ({stage}) =====\n" + g.ir(stage))
        return "\n".join(parts)

    def __getattr__(self, name: str):
        # Only reached for names the wrapper does not have: the wrapped object's.
        d = self.__dict__
        if "_fn" not in d:
            raise AttributeError(name)
        fn = d["_fn"]
        return module_attr(self, fn, name) if d["_is_module"] else getattr(fn, name)

    def __setattr__(self, name: str, value) -> None:
        if self.__dict__.get("_is_module") and name not in Compiled._OWN_ATTRS:
            setattr(self._fn, name, value)  # fast.scale = 5.0 changes the module
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self.__dict__.get("_is_module") and name not in Compiled._OWN_ATTRS:
            delattr(self._fn, name)
        else:
            object.__delattr__(self, name)

    def __dir__(self):
        names = set(super().__dir__())
        if self.__dict__.get("_is_module"):
            names.update(dir(self._fn))
        return sorted(names)

    def __repr__(self) -> str:
        return f"mlircap.Compiled({self.__dict__.get('_fn')!r})"


class CompiledModule(Compiled, torch.nn.Module):
    """``mlircap.compile(module)``: a `Compiled` that is an ``nn.Module``, so it composes
    with what takes modules: a parent module registers it as a child, and
    ``DistributedDataParallel``, ``nn.Sequential``, optimizers over ``parent.parameters()``,
    ``parent.train()/eval()/to()`` and ``parent.state_dict()`` reach the compiled module's
    parameters, buffers and submodules.

    It has no parameters, buffers or hooks of its own: every ``nn.Module`` method runs on
    the wrapped module (a method returning the module returns this wrapper), and its
    internals (``_parameters``, ``_modules``, hooks) are the module's. So the wrapper is
    transparent in names: ``compiled.state_dict()`` has the module's keys, and a parent's
    has ``child.<module's key>`` (no ``_orig_mod.`` level, unlike torch.compile's
    OptimizedModule); a state dict loads into the module, the wrapper, or either one
    wrapped in DDP. Only a call (``__call__``) runs the compiled code; ``forward`` is the
    module's own, uncompiled.
    """

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)

    # Python looks dunder methods up on the type, past __getattr__: a container module's
    # (nn.Sequential, ModuleList, ModuleDict) are the module's too, so `len(fast)`,
    # `fast[0]`, `for layer in fast` and `"k" in fast` behave as on the module (TypeError
    # where it has none) and truth is the module's (an empty Sequential is false).
    def __bool__(self):
        return bool(self.__dict__["_fn"])

    def __len__(self):
        return len(self.__dict__["_fn"])

    def __iter__(self):
        return iter(self.__dict__["_fn"])

    def __contains__(self, item):
        return item in self.__dict__["_fn"]

    def __getitem__(self, key):
        return self.__dict__["_fn"][key]

    def __setitem__(self, key, value):
        self.__dict__["_fn"][key] = value

    def __delitem__(self, key):
        del self.__dict__["_fn"][key]


def _module_method(name: str):
    def method(self, *args, **kwargs):
        module = self.__dict__["_fn"]
        result = getattr(module, name)(*args, **kwargs)
        return self if result is module else result

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(torch.nn.Module, name).__doc__
    return method


for _name, _value in vars(torch.nn.Module).items():
    if callable(_value) and not isinstance(_value, type) and not _name.startswith("__"):
        setattr(CompiledModule, _name, _module_method(_name))
# class-level data of nn.Module that its methods read from the instance (_version: the
# state dict's metadata) is the module's
CompiledModule._version = property(lambda self: self.__dict__["_fn"]._version)


def _inline_types() -> None:
    from .capture.base import INLINE_TYPES

    INLINE_TYPES[Compiled] = INLINE_TYPES[CompiledModule] = "_call"


def _rebuild(fn, options: Options, capture: str, cache_limit: int, break_limit: int) -> Compiled:
    """A wrapper `Compiled.__reduce_ex__` describes (pickle, copy.deepcopy)."""
    return Compiled(fn, options, capture, cache_limit, break_limit)


# a compiled module or function called from code mlircap's capture records is inlined:
# what it wraps is called, traced into the caller's graphs (capture/base.inline_path)
_inline_types()


def compile(fn=None, *, strict: bool = False, device: str = "auto", opt_level: int = 3,
            chip: str = config.DEFAULT_CHIP, capture: str = "mlircap", cache_limit: int = 8, break_limit: int = 64):
    """Compile a PyTorch function or nn.Module with mlircap.

        fast = mlircap.compile(model)
        y = fast(x)
        print(fast.ir("linalg"))

    Graphs mlircap cannot compile run eagerly with a warning naming every
    unsupported op; ``strict=True`` raises ``MlircapCompileError`` instead, for
    every part of the program that would not run compiled (unsupported ops,
    data-dependent output shapes, capture giving up on a function or side
    effect, ``cache_limit``, ``break_limit``), naming the cause and the user's
    file:line. A graph break alone (``.item()``, ``bool(t)``) does not raise:
    the graphs on both sides of it are compiled. ``capture`` picks the capture front: mlircap's own bytecode
    capture (default) or "dynamo".
    ``cache_limit``: compiled variants per function before it runs eagerly.
    ``break_limit``: graph breaks in one call of a function past which it runs
    eagerly for those arguments (one warning), instead of compiling hundreds of
    graphs.
    """
    options = Options(strict=strict, device=device, opt_level=opt_level, chip=chip)
    if fn is None:
        return lambda f: Compiled(f, options, capture, cache_limit, break_limit)
    return Compiled(fn, options, capture, cache_limit, break_limit)


def explain(fn):
    """`mlircap.explain(fn)(*args)`: captures `fn` on these arguments and
    reports graphs, each break with its reason and source file:line, guards
    and recompile reasons (no compilation)."""
    from .capture import explain as capture_explain

    return capture_explain(fn)
