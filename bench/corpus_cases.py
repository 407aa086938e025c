"""The case records of the corpora run by bench/modules5.py's runner (modules5.py, modules6.py,
modules7.py): each corpus keeps its own CASES list and registers into it with the decorators
`registrars(CASES)` returns; R / I make its random inputs."""
from __future__ import annotations

import os

import torch
import torch.nn as nn


def registrars(cases: list):
    """(case, fn_case): decorators appending (name, factory, inputs, train, extra) to `cases`."""

    def case(name, inputs, train=False, ncalls=3, between=None, context=None):
        """Registers a model factory. `inputs` may take the call index (shapes / dtypes per call);
        `between(model, i)` runs on both models before call i (attribute changes between calls);
        `context(i)` is a context manager both sides' call i runs in (grad mode, default dtype)."""
        def deco(factory):
            cases.append((name, factory, inputs, train, dict(ncalls=ncalls, between=between, context=context)))
            return factory
        return deco

    def fn_case(name, inputs, train=False, ncalls=3, between=None, context=None):
        """A case whose model is a plain forward function (no parameters)."""
        def deco(forward):
            cls = type(forward.__name__, (nn.Module,), {"forward": lambda self, *a: forward(*a)})
            cases.append((name, cls, inputs, train, dict(ncalls=ncalls, between=between, context=context)))
            return forward
        return deco

    return case, fn_case


def R(*s, dtype=torch.float32):
    return torch.randn(*s, dtype=dtype)


def I(lo, hi, *s, dtype=torch.int64):  # noqa: E743
    return torch.randint(lo, hi, s, dtype=dtype)


def U(*s, dtype=torch.float32):
    return torch.rand(*s, dtype=dtype)


def grad_ctx(i):
    """Cases that take gradients inside: grad mode on for every call, also under --inference."""
    return torch.enable_grad()


USAGE = """
    python bench/{0} [--filter NAME] [--jobs 1] [--timeout 240] [-v]
    python bench/{0} --case NAME      # one case in this process, with a traceback
    python bench/{0} --inference      # cases that train nothing, under no_grad / inference_mode

The runner is bench/modules5.py's (the same case records, comparison and categories)."""


def run(cases, script, doc):
    """A corpus file's main: bench/modules5.py's command line over its CASES, the usage lines
    above appended to its docstring (the workers run `script` again with --worker)."""
    import modules5
    modules5.main(cases, script, doc.rstrip() + "\n" + USAGE.format(os.path.basename(script)))
