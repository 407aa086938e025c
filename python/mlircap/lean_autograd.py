"""A leaner per-call forward and backward for aot_autograd's autograd Functions (the host time
of a compiled training step).

aot_autograd wraps each differentiated graph in a `CompiledFunction` (a torch.autograd.Function)
whose forward and backward are written for every case it supports: mutated inputs, aliased
outputs, tensor subclasses, symbolic ints, opaque objects and effect tokens saved for the
backward, functionalized RNG state, compiled autograd, donated buffers, double backward. Each
call walks those layers (generated prologue, `torch._check` with a message lambda, config reads,
per-tangent subclass and memory-format coercion, closures): on a 2-core CPU about 11 us of a
small MLP's forward and 40 us of its backward, where the compiled graphs themselves take 11
and 13 us (bench/overhead.py --step).

`lean_functions()` is entered around mlircap's aot_module_simplified call: each Function class
built inside it whose metadata has none of those features (`_simple`) gets a forward and a
backward doing only what is left, laid out once per class:

* apply: torch's C apply, bound once (Function.apply's Python part only tests for functorch
  transforms and setup_context, and unwraps dead functorch wrappers, which this still does);
* forward: the compiled forward, the saved tensors (views detached, as aot_autograd does) on
  ctx, outputs that need no gradient marked non-differentiable, the user outputs returned;
* backward: the gradients of the outputs the backward reads, each in the memory layout the
  backward was traced with (torch's own coercion), the saved tensors unpacked (eager's version
  check) and released, the compiled backward called (in the contextvars the engine hands it).

`direct_forward` then replaces aot_module_simplified's function, where it only wraps such a
lean apply in aot_autograd's plain runtime wrapper (its generated source compared), by one
calling the apply directly with the same grad mode, view replay and argument order.

A backward call outside the plain case takes aot_autograd's own path, unchanged: grad mode on
(create_graph, double backward), a functorch transform, deterministic algorithms switched on after the
compile, a gradient that is not a plain tensor, the backward not yet compiled (lazy).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any

import torch

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_state = threading.local()
_install_lock = threading.Lock()
_installed: list = []

# False: classes keep aot_autograd's forward and backward (for side-by-side measurements)
ENABLED = True


@contextlib.contextmanager
def lean_functions():
    """Function classes aot_autograd builds in this thread meanwhile get the lean forward and
    backward where they qualify (make_lean)."""
    _install()
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        with _no_donated_buffers():
            yield
    finally:
        _state.depth = depth


def _no_donated_buffers():
    """aot_autograd's own switch for donated buffers, off while mlircap compiles (see
    _nothing_donated). Where the Function factory cannot be wrapped (torch 2.11, the GPU host's,
    builds the class inline) this is what keeps `backward(retain_graph=True)` working; it is
    process-wide, and a graph another thread compiles meanwhile also donates nothing, which only
    costs inductor a memory reuse."""
    from torch._functorch import config

    if not hasattr(config, "donated_buffer"):   # pragma: no cover - another torch
        return contextlib.nullcontext()
    return config.patch(donated_buffer=False)


def _install() -> None:
    """Wrap aot_autograd's Function factory once (inert outside lean_functions)."""
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        try:
            from torch._functorch._aot_autograd import runtime_wrappers as rw

            factory = rw._AOTDispatchAutogradFunctionFactory
            build = factory.build
        except (ImportError, AttributeError):   # pragma: no cover - another torch
            _installed.append(None)
            return

        def build_lean(self):
            cls = build(self)
            if getattr(_state, "depth", 0):
                _nothing_donated(self.spec)
                _no_overlapping_tangents(self.spec)
                if ENABLED:
                    try:
                        make_lean(cls, self.spec)
                    except Exception:  # noqa: BLE001 - the class stays as aot_autograd built it
                        pass
            return cls

        factory.build = build_lean
        _record_wrapper_sources()
        _installed.append(build)


def _record_wrapper_sources() -> None:
    """aot_autograd's generated runtime wrapper (`_runtime_wrapper`, built inside
    lean_functions) keeps its source (direct_forward compares it with the plain case's)."""
    try:
        from torch._functorch._aot_autograd import subclass_codegen as sc

        compile_source = sc._compile_and_exec_source
    except (ImportError, AttributeError):   # pragma: no cover - another torch
        return

    def recording(source, globals_dict, fn_name, artifact_name, *args, **kwargs):
        fn = compile_source(source, globals_dict, fn_name, artifact_name, *args, **kwargs)
        if getattr(_state, "depth", 0) and artifact_name == "runtime_wrapper_orchestration":
            try:
                fn._mlircap_source = source
            except AttributeError:   # pragma: no cover - not a Python function
                pass
        return fn

    sc._compile_and_exec_source = recording


def _no_overlapping_tangents(spec: Any) -> None:
    """A gradient is laid out as its output was traced before the backward runs (aot_autograd's
    coerce_to_expected_memory_format: empty_strided of the traced size and stride, then copy_).
    For an output whose elements share memory (`(x * 1.5).unfold(0, 3, 1)` returned to a
    boolean-mask index that splits the graphs) that copy kept one of each shared element's
    values, and the gradient reaching x was wrong in about half its values (bench/fuzz_graphs.py
    --grad seed 3374). mlircap's backward graphs read their inputs by value: such a gradient is
    made contiguous instead."""
    from .layouts import non_overlapping

    m = getattr(spec, "fw_metadata", None)
    try:
        from torch._functorch._aot_autograd.schemas import MemoryFormatMeta, PlainTensorMeta
    except ImportError:   # pragma: no cover - another torch
        return
    for meta in getattr(m, "subclass_tangent_meta", None) or ():
        fmt = getattr(meta, "memory_format", None)
        if type(meta) is PlainTensorMeta and isinstance(fmt, MemoryFormatMeta) and fmt.memory_format is None \
                and fmt.size is not None and fmt.stride is not None and not non_overlapping(fmt.size, fmt.stride):
            meta.memory_format = MemoryFormatMeta(memory_format=torch.contiguous_format)


def _nothing_donated(spec: Any) -> None:
    """No saved tensor is donated to the backward: mlircap's compiled backward never reuses
    its inputs' memory (inductor's does, which is what the metadata is for). aot_autograd's
    backward raises under retain_graph=True where the partitioner found any donatable saved
    tensor ("This backward function was compiled with non-empty donated buffers ..."): a
    second backward through a compiled graph raised where eager's ran."""
    m = getattr(spec, "fw_metadata", None)
    if m is not None and hasattr(m, "bw_donated_idxs"):
        m.bw_donated_idxs = []


def _simple(cls: Any, spec: Any) -> bool:
    """The class's metadata uses none of what the lean forward and backward leave out."""
    from torch._functorch._aot_autograd.schemas import OutputType, PlainTensorMeta

    m = spec.fw_metadata
    if spec.maybe_subclass_meta is not None or spec.num_symints_saved_for_bw or spec.backward_state_indices:
        return False
    if m.num_mutated_inp_runtime_indices or m.num_intermediate_bases or m.num_outputs_aliased or \
            m.num_unsafe_view_outputs or m.tokens or m.num_backward_tokens or m.is_rng_op_functionalized or \
            m.num_graphsafe_rng_states or m.dynamic_saved_tensors_idxs or m.num_symints_saved_for_bw or \
            m.num_opaque_objects_saved_for_bw or m.indices_of_inputs_that_requires_grad_with_mutations_in_bw:
        return False
    if m.bw_donated_idxs:
        return False
    if m.num_forward_returns != m.num_outputs or len(m.output_info) != m.num_outputs:
        return False
    if any(o.output_type is not OutputType.non_alias for o in m.output_info):
        return False
    if not getattr(cls, "boxed_grads_call", False):
        return False
    for name in ("forward", "backward"):
        if not isinstance(cls.__dict__.get(name), staticmethod):
            return False
    metas = m.subclass_tangent_meta
    wanted = _tangent_outputs(m)
    if len(metas) != len(wanted):
        return False
    return all(type(t) is PlainTensorMeta and t.memory_format is not None for t in metas)


def _tangent_outputs(m: Any) -> list[int]:
    """The outputs whose gradients the backward reads, in its order (aot_autograd's prologue:
    no mutated input, no intermediate base)."""
    return [i for i, o in enumerate(m.output_info)
            if issubclass(o.raw_type, _Tensor) and o.requires_grad_for_backward]


def _missing_gradients(grads: list, out_meta: list) -> bool:
    """Whether every gradient of the node's outputs is missing (the lean forward turns torch's
    materialization off). Eager's own backward functions pass no gradient on when none comes in;
    a Function's backward materialized zeros and ran, so an input reached only through a path
    that carries no gradient got a zero .grad where eager leaves None (bench/fuzz_graphs --grad
    --families edges seed 340: `v1 = (x3 * 2)[x3 > 0]; v1.mul_(2)` beside a loss of other
    inputs: the graph after the mask writing v1 passes v1 no gradient, the mask's backward
    passes the graph before it none, and that graph gave x3 zeros). Otherwise the missing ones
    become zeros in place, as torch's materialization makes them (none for non-differentiable
    outputs, as aot_autograd asks)."""
    if all(g is None for g in grads):
        return True
    for i, g in enumerate(grads):
        if g is None and out_meta[i] is not None:
            size, stride, dtype, device = out_meta[i]
            grads[i] = torch.empty_strided(size, stride, dtype=dtype, device=device).zero_()
    return False


def make_lean(cls: Any, spec: Any) -> bool:
    """Give `cls` (aot_autograd's CompiledFunction, just built from `spec`) the lean forward
    and backward; False (the class untouched) where its metadata is not the plain case."""
    if not _simple(cls, spec):
        return False
    from torch._functorch._aot_autograd.runtime_wrappers import coerce_to_expected_memory_format

    m = spec.fw_metadata
    orig_backward = cls.__dict__["backward"].__func__
    n_out = m.num_outputs
    vc = m.tensors_saved_for_backwards_with_vc_check_slice
    no_vc = m.tensors_saved_for_backwards_no_vc_check_slice
    non_diff = tuple(i for i, o in enumerate(m.output_info) if not o.requires_grad)
    disable_amp = bool(spec.disable_amp)
    tangents = tuple(zip(_tangent_outputs(m), (t.memory_format for t in m.subclass_tangent_meta)))
    # (the traced size and stride of each, as ints, where that is what torch's coercion checks:
    # a gradient laid out so is used as it is)
    traced = tuple((tuple(int(v) for v in f.size), tuple(int(v) for v in f.stride))
                   if f.memory_format is None and f.size is not None and f.stride is not None else None
                   for _, f in tangents)
    check_deterministic = m.deterministic is not None and not m.deterministic
    has_no_vc = bool(m.num_tensors_saved_with_no_vc_check)
    no_autocast = torch._C._DisableAutocast
    peek = torch._C._functorch.peek_interpreter_stack
    deterministic = torch.are_deterministic_algorithms_enabled
    in_tls, tls_obj = torch._C._is_key_in_tls, torch._C._get_obj_in_tls

    # per output: its size, stride, dtype and device (static shapes: one graph, one layout), the
    # zeros of a missing gradient; None for a non-tensor or non-differentiable output
    out_meta: list = []
    n_args: list = []   # the forward's argument count (one graph: always the same)

    def forward(ctx, *args):
        if disable_amp:
            with no_autocast():
                outs = cls.compiled_fw(list(args))
        else:
            outs = cls.compiled_fw(list(args))
        if type(outs) is not list:
            outs = list(outs) if isinstance(outs, tuple) else [outs]
        ctx.save_for_backward(*[x.detach() if x._is_view() else x for x in outs[vc]])
        ctx._tensors_no_vc_check = [x.detach() if x._is_view() else x for x in outs[no_vc]]
        ctx.symints = []
        ctx.opaque_objects = []
        raw = outs[:n_out]
        if non_diff:
            ctx.mark_non_differentiable(*[raw[i] for i in non_diff if isinstance(raw[i], _Tensor)])
        ctx._materialize_non_diff_grads = False
        if not out_meta:
            n_args.append(len(args))
            out_meta.extend((x.size(), x.stride(), x.dtype, x.device) if isinstance(x, _Tensor) and i not in non_diff
                            else None for i, x in enumerate(raw))
        ctx.set_materialize_grads(False)   # (backward: _missing_gradients)
        return tuple(raw)

    def backward(ctx, *flat):
        boxed = len(flat) == 1 and type(flat[0]) is list
        given = flat[0] if boxed else list(flat)
        # (an identity test per gradient: `None in given` compared each tensor with None
        # through Tensor.__eq__, a raised and caught TypeError: 30-60 us a tensor)
        if len(given) == n_out:
            for g in given:
                if g is None:
                    if _missing_gradients(given, out_meta):   # no gradient reached the node: none leaves it
                        ctx.maybe_clear_saved_tensors()
                        return (None,) * n_args[0]
                    if not boxed:
                        flat = tuple(given)
                    break
        bw = cls.compiled_bw
        if bw is None or len(flat) != 1 or type(flat[0]) is not list or len(flat[0]) != n_out or \
                _grad_enabled() or peek() is not None or \
                (check_deterministic and deterministic()) or not getattr(bw, "_boxed_call", False):
            return orig_backward(ctx, *flat)
        grads = flat[0]
        ins = []
        for (i, fmt), lay in zip(tangents, traced):
            g = grads[i]
            if type(g) is not _Tensor and isinstance(g, _Tensor):
                return orig_backward(ctx, *flat)   # a subclass: aot_autograd's coercion (or error)
            if type(g) is _Tensor and (lay is None or g.shape != lay[0] or g.stride() != lay[1]):
                g = coerce_to_expected_memory_format(g, fmt)
            ins.append(g)
        saved = ctx.saved_tensors
        if has_no_vc:
            saved = (*saved, *ctx._tensors_no_vc_check)
        grads.clear()
        args = [*saved, *ins]
        del saved, ins
        ctx.maybe_clear_saved_tensors()   # (freed unless retain_graph)
        # (the engine leaves the contextvars of the forward's thread in the TLS: the backward
        # runs in them, as aot_autograd runs it)
        cc = tls_obj("context") if in_tls("context") else None
        out = cc.run(run, bw, args) if cc is not None else run(bw, args)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    def run(bw, args):
        if disable_amp:
            with no_autocast():
                return bw(args)
        return bw(args)

    # apply: torch.autograd.Function.apply's Python part is a setup_context test (this class has
    # none), the functorch test and a generator unwrapping dead functorch wrappers; the same,
    # with the C apply bound once (read by aot_autograd's runtime wrapper right after build)
    generic_apply = cls.apply
    bound_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, cls)
    transforms_active = torch._C._are_functorch_transforms_active
    unwrap = torch._C._functorch.unwrap_if_dead

    def apply(*args):
        if transforms_active():
            return generic_apply(*args)   # (vmap / grad: torch's error or custom_function_call)
        return bound_apply(*[unwrap(a) if isinstance(a, _Tensor) else a for a in args])

    apply._mlircap_lean_class = cls
    cls.forward = staticmethod(forward)
    cls.backward = staticmethod(backward)
    cls.apply = staticmethod(apply)
    cls._mlircap_lean = True
    return True


# aot_autograd's generated `_runtime_wrapper` for a Function whose metadata is the plain case
# (no mutated input, aliased output, intermediate base, detached input, autocast switch, dynamic
# output or grad-mode change): grad mode and view replay on around the Function's apply, the
# outputs as a list. {n}: the number of outputs.
_PLAIN_RUNTIME_WRAPPER = """def _runtime_wrapper(_compiled_fn_, _first_ctx_, _on_before_call_, args):
    orig_inputs = {{}}
    with _first_ctx_():
        args_ = list(args)
        prev_view_replay_enabled = torch._C._is_view_replay_enabled()
        try:
            if not prev_view_replay_enabled:
                torch._C._set_view_replay_enabled(True)
            with torch.enable_grad():
                _on_before_call_()
                all_outs = _compiled_fn_(args_)
                if isinstance(all_outs, tuple):
                    all_outs = list(all_outs)
                elif not isinstance(all_outs, list):
                    all_outs = [all_outs]
        finally:
            if torch._C._is_view_replay_enabled() != prev_view_replay_enabled:
                torch._C._set_view_replay_enabled(prev_view_replay_enabled)
    del args
    if len(all_outs) != {n}:
        raise AssertionError(f"expected {n} outputs, got {{len(all_outs)}}")
    fw_outs = all_outs
    ret_outs = fw_outs
    return ret_outs"""


def _cells(fn: Any) -> dict:
    return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ())}


def direct_forward(fwd: Any) -> Any:
    """aot_module_simplified's function `fwd`, or where it only wraps a lean Function's apply
    in aot_autograd's plain runtime wrapper, a function calling that apply directly: the same
    work (grad mode on, view replay on, the parameters first, the outputs as a list) without the
    wrapper's layers (the forward, runtime_wrapper, the generated _runtime_wrapper with its two
    context managers, the boxed-call adapter: ~4 us of a training call's forward). Each link of
    the chain is checked once here, the generated wrapper by its source; a call takes aot's own
    path while grad mode is off, the profiler records, or aot's first-call analysis is pending."""
    try:
        fc = fwd.__code__
        if fc.co_name != "forward" or fc.co_argcount or not fc.co_flags & 0x04 or fwd.__kwdefaults__:
            return fwd
        outer = _cells(fwd)
        rw = outer["compiled_fn"]
        params = outer["params_buffers_flat"]
        if rw.__code__.co_name != "runtime_wrapper" or not rw.__code__.co_filename.endswith("runtime_wrappers.py"):
            return fwd
        inner = _cells(rw)
        gen, boxed, first = inner["_codegen_runtime_wrapper"], inner["_inner_compiled_fn"], \
            inner["_first_invocation_ctx"]
        if boxed.__code__.co_name != "g" or not boxed.__code__.co_filename.endswith("utils.py"):
            return fwd
        apply = _cells(boxed)["f"]
        cls = getattr(apply, "_mlircap_lean_class", None)
        if cls is None or cls.__dict__.get("apply") is None or cls.apply is not apply:
            return fwd
        n = cls.metadata.num_outputs
        if getattr(gen, "_mlircap_source", None) != _PLAIN_RUNTIME_WRAPPER.format(n=n) or \
                gen.__globals__.get("torch") is not torch or not isinstance(params, list) or \
                not hasattr(first, "_is_first"):
            return fwd
    except (AttributeError, KeyError, TypeError, ValueError):
        return fwd
    from torch.autograd import profiler

    replaying, set_replaying = torch._C._is_view_replay_enabled, torch._C._set_view_replay_enabled

    def forward(*args):
        if first._is_first or not _grad_enabled() or profiler._is_profiler_enabled:
            return fwd(*args)
        if replaying():
            return list(apply(*params, *args))
        set_replaying(True)
        try:
            return list(apply(*params, *args))
        finally:
            set_replaying(False)

    forward.__dict__.update(fwd.__dict__)
    forward._mlircap_direct = fwd
    return forward
