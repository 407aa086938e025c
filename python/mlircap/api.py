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

    def __init__(self, fn, options: Options, capture: str = "dynamo"):
        self._fn = fn
        self._options = options
        self.graphs: list[CompiledGraph] = []
        backend = make_backend(options, self.graphs)
        if capture == "dynamo":
            # Temporary capture front: torch's Dynamo. dynamic=False: mlircap
            # compiles static shapes; a new shape is a recompile.
            self._compiled = torch.compile(fn, backend=backend, dynamic=False)
        else:
            raise ValueError(f"unknown capture front {capture!r}")
        if not isinstance(fn, torch.nn.Module):
            functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def ir(self, stage: str = "linalg") -> str:
        parts = []
        for g in self.graphs:
            parts.append(f"// ===== {g.name} ({stage}) =====\n" + g.ir(stage))
        return "\n".join(parts)

    def __getattr__(self, name):
        # Module attributes (parameters, submodules, train()/eval()) pass through.
        return getattr(self.__dict__["_fn"], name)


def compile(fn=None, *, strict: bool = False, device: str = "auto", opt_level: int = 3,
            chip: str = "sm_90", capture: str = "dynamo"):
    """Compile a PyTorch function or nn.Module with mlircap.

        fast = mlircap.compile(model)
        y = fast(x)
        print(fast.ir("linalg"))

    Graphs mlircap cannot compile run eagerly with a warning naming every
    unsupported op; ``strict=True`` raises instead.
    """
    options = Options(strict=strict, device=device, opt_level=opt_level, chip=chip)
    if fn is None:
        return lambda f: Compiled(f, options, capture)
    return Compiled(fn, options, capture)
