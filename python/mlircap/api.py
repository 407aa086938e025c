"""`mlircap.compile`: the user-facing entry point."""
from __future__ import annotations

import functools

import torch

from .backend import CompiledGraph, Options, make_backend


class Compiled:
    """A compiled function or module. Call it like the original.

    ``.graphs`` lists every graph compiled so far (one per captured region and
    recompile); ``.ir(stage)`` returns that stage's IR for all of them
    (stages: fx, torch, linalg, fused, llvm, ptx).
    """

    def __init__(self, fn, options: Options, capture: str = "mlircap", cache_limit: int = 8):
        self._fn = fn
        self._options = options
        self.graphs: list[CompiledGraph] = []
        backend = make_backend(options, self.graphs)
        if capture == "mlircap":
            # mlircap's own bytecode capture (python/mlircap/capture): guards,
            # graph breaks that resume, side effects replayed.
            from .capture import capture as bytecode_capture

            self._compiled = bytecode_capture(fn, backend, cache_limit=cache_limit)
        elif capture == "dynamo":
            # torch's Dynamo as the capture front. dynamic=False: mlircap
            # compiles static shapes; a new shape is a recompile.
            self._compiled = torch.compile(fn, backend=backend, dynamic=False)
        else:
            raise ValueError(f"unknown capture front {capture!r} (mlircap or dynamo)")
        self.capture = capture
        if not isinstance(fn, torch.nn.Module):
            functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

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

    def __getattr__(self, name):
        # Module attributes (parameters, submodules, train()/eval()) pass through.
        return getattr(self.__dict__["_fn"], name)


def compile(fn=None, *, strict: bool = False, device: str = "auto", opt_level: int = 3,
            chip: str = "sm_90", capture: str = "mlircap", cache_limit: int = 8):
    """Compile a PyTorch function or nn.Module with mlircap.

        fast = mlircap.compile(model)
        y = fast(x)
        print(fast.ir("linalg"))

    Graphs mlircap cannot compile run eagerly with a warning naming every
    unsupported op; ``strict=True`` raises instead. ``capture`` picks the
    capture front: mlircap's own bytecode capture (default) or "dynamo".
    ``cache_limit``: compiled variants per function before it runs eagerly.
    """
    options = Options(strict=strict, device=device, opt_level=opt_level, chip=chip)
    if fn is None:
        return lambda f: Compiled(f, options, capture, cache_limit)
    return Compiled(fn, options, capture, cache_limit)


def explain(fn):
    """`mlircap.explain(fn)(*args)`: captures `fn` on these arguments and
    reports graphs, each break with its reason and source file:line, guards
    and recompile reasons (no compilation)."""
    from .capture import explain as capture_explain

    return capture_explain(fn)
