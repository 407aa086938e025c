"""Compiling captured graphs with the user backend: fallback to the FX graph when the
backend fails, first-run check, strict-mode errors (higher-order gradients: higher_order.py)."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from .. import logs as _logs
from .base import _strict_error
from .higher_order import _HigherOrderGrad
from .graph_prep import _SplitOutputs, _fold_number_sizes, _grad_free_inputs, _output_nodes, _separate_gradient_groups


def _graph_loc(gm: fx.GraphModule, text: str = "") -> str:
    """The user's file:line of the node an error names (FX's "While executing %name"),
    else of the graph's first node with a source location."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    m = re.search(r"While executing %(\w+)", text)
    if m:
        nodes = [n for n in nodes if n.name == m.group(1)] + nodes
    for n in nodes:
        t = n.meta.get("stack_trace") or ""
        lm = re.search(r'File "([^"]+)", line (\d+)', t)
        if lm:
            return f"{lm.group(1)}:{lm.group(2)}"
    return "<unknown>"


_HAS_LOC = re.compile(r" at \S+:\d+")


def _strict_backend_error(e: Exception, gm: fx.GraphModule, what: str) -> Exception:
    """strict=True: the error for a captured graph the backend did not compile, naming the
    user's file:line (kept as it is when the backend's message already names one)."""
    text = str(e)
    head, _, rest = text.partition("\n")
    if getattr(e, "propagate", False) and _HAS_LOC.search(head):
        return e
    if "DynamicOutputShape" in head or "data-dependent" in head.lower() or "DataDependent" in head:
        head += " (an operation whose output shape depends on tensor data)"
    prefix = "" if getattr(e, "propagate", False) else f"{what}: {type(e).__name__}: "
    err = _strict_error(f"{prefix}{head} at {_graph_loc(gm, text)}" + (f"\n{rest}" if rest else ""))
    err.__cause__ = e
    return err


def _compile_graph(backend: Callable, gm: fx.GraphModule, examples: list, uses_rng: bool,
                   double_backward: bool = False, strict: bool = False, dyn_inputs: tuple = ()) -> Callable:
    """Compile one captured graph with the user backend.  If the backend fails to compile
    it, or its compiled function fails on the first run before touching any input, the
    captured FX graph itself is run instead (same semantics, just not backend-compiled);
    strict=True raises instead.  `dyn_inputs`: positions of inputs whose shape depends on
    tensor data (made by `where(m)`, `x[mask]` before a graph break): the graph is
    compiled per shape of those (_PerShape)."""
    if dyn_inputs:
        return _PerShape(backend, gm, examples, uses_rng, double_backward, strict, tuple(dyn_inputs))
    parts = _separate_gradient_groups(gm, examples)
    if parts is not None:
        return _SplitOutputs(parts, len(_output_nodes(gm)), lambda sub, ex: _compile_graph(
            backend, sub, ex, uses_rng, double_backward, strict))
    _fold_number_sizes(gm)
    grad = torch.is_grad_enabled()
    cut = _grad_free_inputs(gm, examples)
    if cut:
        examples = [e.detach() if i in cut else e for i, e in enumerate(examples)]
    try:
        with torch._C.DisableTorchFunction():
            fn = backend(gm, examples)
    except Exception as e:
        # a graph that switches grad mode (an optimizer step's no_grad) and failed to
        # trace halfway left the process-wide grad mode switched: restore it
        torch._C._set_grad_enabled(grad)
        if strict:
            raise _strict_backend_error(e, gm, "the backend failed to compile a captured graph")
        if getattr(e, "propagate", False):  # the backend asked for its error to reach the user (strict mode)
            raise
        _logs.warn(f"mlircap.capture: backend failed to compile a captured graph "
                      f"({type(e).__name__}: {str(e)[:200]}); running the graph without it", RuntimeWarning)
        return gm.forward
    if fn is None:
        return gm.forward
    shared = _sharing_groups(examples)
    if shared:
        fn = _SameAliasing(fn, gm.forward, shared, examples)
    checked = _FirstRunChecked(fn, gm.forward, uses_rng, gm if strict else None)
    if double_backward and fn != gm.forward:
        runner = _HigherOrderGrad(checked, gm)
        checked.slot = (runner.fns, 0)   # (once checked, the compiled function takes its place there)
        checked = runner
    return _DetachedInputs(checked, cut) if cut else checked


def _sharing_groups(examples: Sequence) -> tuple[tuple[int, ...], ...]:
    """The positions of the tensor inputs sharing one storage, a group per storage with more
    than one (a view of an input passed beside it: `t[:, :2]` and `t`)."""
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(examples):
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and type(t) in (torch.Tensor, torch.nn.Parameter):
            try:
                ptr = t.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):
                continue
            if ptr:
                groups.setdefault(ptr, []).append(i)
    return tuple(tuple(g) for g in groups.values() if len(g) > 1)


def _aliasing(args: Sequence, groups: tuple[tuple[int, ...], ...]) -> tuple:
    """How the inputs of each group alias, as aot_autograd's synthetic base reads it at every
    call (runtime_wrappers.merge_view_inputs): one storage, and for each input its ._base,
    by identity (the group's input it is, or the first input of the group with that base) with
    the base's size, stride and offset."""
    sig = []
    for g in groups:
        ptr = None
        seen: dict[int, int] = {}
        row = []
        for i in g:
            t = args[i]
            if not isinstance(t, torch.Tensor):
                return (None,)
            p = t.untyped_storage().data_ptr()
            if ptr is None:
                ptr = p
            elif p != ptr:
                return (None,)
            b = t._base
            if b is None:
                row.append(None)
                continue
            who = next((j for j in g if args[j] is b), None)
            row.append((who, seen.setdefault(id(b), i), tuple(b.shape), b.stride(), b.storage_offset()))
        sig.append(tuple(row))
    return tuple(sig)


class _SameAliasing:
    """A graph compiled for inputs sharing memory (`_mask_invalid_locations(t)` of transformers'
    Longformer passes `t[:, :w]` and `t`) runs compiled while they alias as they did when it was
    compiled. aot_autograd's compiled function takes such inputs as one base it finds from their
    ._base fields at every call and regenerates each input from it with the base's traced size:
    when the inputs were views of one [2, 8, 2, 5] buffer as the graph was recorded, and at a
    replay one of them is the other's base (an earlier compiled graph returned it as a tensor of
    its own), the call handed a [2, 16, 1, 5] tensor for the [2, 8, 2, 5] base and raised (its
    eager rerun too: the same wrapper). Such a call runs the captured graph."""
    __slots__ = ("fn", "fallback", "groups", "sig")

    def __init__(self, fn: Callable, fallback: Callable, groups: tuple, examples: Sequence) -> None:
        self.fn, self.fallback, self.groups = fn, fallback, groups
        self.sig = _aliasing(examples, groups)

    def __call__(self, *args: Any) -> Any:
        if _aliasing(args, self.groups) != self.sig:
            return self.fallback(*args)
        return self.fn(*args)


class _DetachedInputs:
    """Calls `fn` with the inputs at `cut` detached (_grad_free_inputs)."""
    __slots__ = ("fns", "cut")

    def __init__(self, fn: Callable, cut: tuple[int, ...]) -> None:
        self.fns, self.cut = [fn], cut
        if isinstance(fn, _FirstRunChecked):
            fn.slot = (self.fns, 0)

    def __call__(self, *args: Any) -> Any:
        a = list(args)
        for i in self.cut:
            if isinstance(a[i], torch.Tensor):
                a[i] = a[i].detach()
        return self.fns[0](*a)


class _PerShape:
    """A captured graph taking tensors whose shapes depend on tensor data: the function
    guards checked the call's arguments, not these, so a later call hands the graph
    other sizes than it was compiled for (a backend compiling static shapes then read
    and wrote with the first call's sizes: wrong results). Compiled once per shape of
    those inputs, at most MAX_VARIANTS, then the captured graph runs (strict=True:
    raises)."""
    MAX_VARIANTS = 8
    __slots__ = ("backend", "gm", "uses_rng", "double_backward", "strict", "dyn", "variants")

    def __init__(self, backend: Callable, gm: fx.GraphModule, examples: list, uses_rng: bool,
                 double_backward: bool, strict: bool, dyn: tuple) -> None:
        self.backend, self.gm, self.uses_rng = backend, gm, uses_rng
        self.double_backward, self.strict, self.dyn = double_backward, strict, dyn
        self.variants: dict[tuple, Callable] = {}
        self.variants[self._key(examples)] = self._compile(examples)

    def _key(self, args: Sequence[Any]) -> tuple:
        return tuple(tuple(args[i].shape) if isinstance(args[i], torch.Tensor) else None for i in self.dyn)

    def _compile(self, examples: Sequence[Any]) -> Callable:
        return _compile_graph(self.backend, self.gm, list(examples), self.uses_rng, self.double_backward,
                              self.strict)

    def __call__(self, *args: Any) -> Any:
        key = self._key(args)
        fn = self.variants.get(key)
        if fn is None:
            if len(self.variants) >= self.MAX_VARIANTS:
                if self.strict:
                    raise _strict_error(f"a captured graph taking tensors whose shapes depend on tensor data "
                                        f"met more than {self.MAX_VARIANTS} shapes at {_graph_loc(self.gm)}")
                fn = self.gm.forward
            else:
                fn = self._compile(args)
            self.variants[key] = fn
        return fn(*args)


_top_saved_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)


def _recomputing() -> bool:
    """Whether non-reentrant checkpoint is recomputing a forward (its recomputation hooks on top
    of the saved-tensor hooks). It checks that the recomputation saves what the forward saved:
    a graph not yet run compiled had its forward run eagerly (the recording call), so it runs as
    captured there too. Before, its first compiled run happened inside the recomputation and
    saved aot_autograd's tensors instead ('Recomputed values ... have different metadata').
    Once a graph has run compiled, its forwards and recomputations both run compiled."""
    top = _top_saved_hooks(False) if _top_saved_hooks is not None else None
    return top is not None and getattr(top[0], "__qualname__", "").startswith("_recomputation_hook.")


class _FirstRunChecked:
    """Runs the backend-compiled `fn`; its first run falls back to the captured graph
    when `fn` fails before touching an input.  `slot` (list, index): where the caller
    holds this object; once checked, `fn` itself (or the fallback) takes its place
    there, so later calls skip this layer."""
    __slots__ = ("fn", "fallback", "uses_rng", "checked", "strict_gm", "slot")

    def __init__(self, fn: Callable, fallback: Callable, uses_rng: bool,
                 strict_gm: fx.GraphModule | None = None) -> None:
        self.fn, self.fallback, self.uses_rng, self.checked = fn, fallback, uses_rng, False
        self.strict_gm = strict_gm   # strict=True: a failing first run raises (after the eager check)
        self.slot: tuple[list, int] | None = None

    def _done(self) -> None:
        self.checked = True
        if self.slot is not None:
            lst, i = self.slot
            if lst[i] is self:
                lst[i] = self.fn

    def __call__(self, *args: Any) -> Any:
        if self.checked:
            return self.fn(*args)
        if _recomputing():
            return self.fallback(*args)
        vers = [a._version if isinstance(a, torch.Tensor) and not a.is_inference() else None for a in args]
        rng = torch.get_rng_state() if self.uses_rng else None
        grad = torch.is_grad_enabled()
        try:
            out = self.fn(*args)
        except Exception as e:
            torch._C._set_grad_enabled(grad)   # a graph failing after a grad-mode switch
            if getattr(e, "propagate", False) or any(
                    v is not None and a._version != v for a, v in zip(args, vers)):
                raise
            if rng is not None:
                torch.set_rng_state(rng)
            if self.strict_gm is not None:
                self.fallback(*args)   # the same error eagerly: the user's, raised as eager raises it
                raise _strict_backend_error(e, self.strict_gm, "the backend-compiled graph failed on its first run")
            try:
                out = self.fallback(*args)
            except Exception as e2:
                if type(e2) is type(e):
                    # the captured graph raises too (integer division by zero, an index out of
                    # range): the call's data, not the backend; the compiled graph is kept for
                    # the next call, still unchecked (it ran uncompiled for good before)
                    raise
                self.fn = self.fallback
                self._done()
                raise
            _logs.warn(f"mlircap.capture: backend-compiled graph failed on its first run "
                          f"({type(e).__name__}: {str(e)[:200]}); running the captured graph without it",
                          RuntimeWarning)
            self.fn = self.fallback
            self._done()
            return out
        self._done()
        return out
