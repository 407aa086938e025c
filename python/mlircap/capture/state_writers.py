"""C functions that write process-wide state or switch on autograd modes a compiled graph
cannot honour, seen from untraced code by the tracer (tracer.py's C-call events): the RNG and
default-dtype writers (`_global_state_writer`), library functions learned writing them
(`_learn_state_writer`, into classify._LEARNED_WRITERS, which `_call_kind` reads), saved-tensor
hooks / forward AD levels / dispatch modes (`_autograd_mode_writer`, `_autograd_mode_on`), and
hooks registered on autograd nodes (`_node_hook_call`).  Split out of classify.py (pure move)."""
from __future__ import annotations

import types

import torch
import torch.autograd.forward_ad as _forward_ad

from .classify import _LEARNED_WRITERS, _OWN_DIR, _classify


# C functions that write process-wide state a recording cannot see from the opcodes of
# untraced (opaque) library code: the RNG (a helper that seeds or restores the generator
# around a random op) and the default dtype.  Called from an uncapturable call they are
# replayed with it; called from any other untraced code, capture gives up (eager).
_GENERATOR_WRITERS = {"manual_seed", "seed", "set_state", "set_offset", "graphsafe_set_state"}
_STATE_WRITERS = (torch._C._set_default_dtype, torch._C._set_default_tensor_type)


_CALL_MACHINERY = ("_call_impl", "_wrapped_call_impl", "__call__")


def _learn_state_writer(frame: types.FrameType) -> bool:
    """frame (untraced) writes process-wide state: the library function the traced code
    called to get there (the outermost untraced frame below the innermost traced one) joins
    _LEARNED_WRITERS.  True if it is new (a recording that gave up on it may be redone);
    False where it is not a function of its own (nn.Module's call machinery, this package)."""
    top, f = None, frame
    while f is not None and not (_classify(f.f_code) == "user" and f.f_trace is not None):
        top, f = f, f.f_back
    if f is None or top is None:
        return False
    code = top.f_code
    if code in _LEARNED_WRITERS or code.co_filename.startswith(_OWN_DIR) or \
            code.co_name in _CALL_MACHINERY or code.co_filename == torch.nn.modules.module.__file__:
        return False
    _LEARNED_WRITERS.add(code)
    return True


# C functions that switch on autograd modes a compiled graph cannot honour: default saved-tensor
# hooks (their pack / unpack run on what each autograd node saves; a compiled graph saves other
# tensors, and a replayed graph runs under no hook: activation-compression hooks gave gradients
# from unrounded activations) and forward-mode AD levels (a graph recorded at one level read
# another's dual tensors at replay). Called from untraced code (saved_tensors_hooks.__enter__,
# forward_ad.dual_level), capture gives up on the function; a call made while one is on runs
# eagerly (_autograd_mode_on, cache.py).
_AUTOGRAD_MODE_WRITERS = {torch._C._autograd._push_saved_tensors_default_hooks: "saved tensor hooks",
                          torch._C._enter_dual_level: "a forward AD level",
                          # anomaly detection's NaN checks run on eager's autograd nodes (a
                          # caught 'SqrtBackward0 returned nan values' was no error at replay)
                          torch.set_anomaly_enabled: "anomaly detection",
                          # a TorchDispatchMode (allow_mutation_on_saved_tensors' clone-before-
                          # mutate, a user's) sees each aten op eager runs, not a compiled graph's
                          torch._C._push_on_torch_dispatch_stack: "a TorchDispatchMode"}


def _autograd_mode_writer(f: object) -> str | None:
    """The autograd mode calling the C function f switches on (_AUTOGRAD_MODE_WRITERS), or None."""
    try:
        return _AUTOGRAD_MODE_WRITERS.get(f)
    except TypeError:   # unhashable
        return None


def _torch_hook(pack: object) -> bool:
    """`pack` is a pack hook of torch's own (torch.utils.checkpoint's, save_on_cpu's): it
    keeps the saved values (a compiled graph that saves other tensors computes the same)."""
    mod = getattr(pack, "__module__", None) or ""
    return mod == "torch" or mod.startswith("torch.")


def _pushes_user_hooks(frame: types.FrameType) -> bool:
    """The untraced frame calling _push_saved_tensors_default_hooks pushes hooks other than
    torch's own (saved_tensors_hooks.__enter__ of the user's pack / unpack functions)."""
    hooks = frame.f_locals.get("self")
    return not _torch_hook(getattr(hooks, "pack_hook", None))


def _autograd_mode_on() -> str | None:
    """The autograd mode on at this point that compiled graphs cannot honour, or None."""
    top = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if top is not None and not _torch_hook(top[0]):
        return "saved tensor hooks are on (torch.autograd.graph.saved_tensors_hooks)"
    if _forward_ad._current_level >= 0:
        return "a forward AD level is on (torch.autograd.forward_ad.dual_level)"
    if torch._C._len_torch_dispatch_stack():
        return "a TorchDispatchMode is active"
    return None


def _node_hook_call(f: object, args: list) -> bool:
    """f registers a hook on an autograd graph node (`y.grad_fn.register_hook(fn)` /
    `register_prehook`): a replay's tensors come from compiled graphs, whose nodes are others
    (one node for the whole graph, its grad_inputs the graph's inputs')."""
    if getattr(f, "__name__", None) not in ("register_hook", "register_prehook"):
        return False
    so = getattr(f, "__self__", None)
    if so is None and args:
        so = args[0]
    return isinstance(so, torch.autograd.graph.Node)


def _global_state_writer(f: object) -> str | None:
    """What process-wide state calling the C function f writes ("the RNG state", ...), or None."""
    so = getattr(f, "__self__", None)
    if isinstance(so, torch.Generator):
        return "the RNG state" if getattr(f, "__name__", "") in _GENERATOR_WRITERS else None
    return "the default dtype" if any(f is w for w in _STATE_WRITERS) else None
