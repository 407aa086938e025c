"""nn.MultiheadAttention / nn.TransformerEncoderLayer / nn.TransformerEncoder and their fused
fast paths (torch._native_multi_head_attention, torch._transformer_encoder_layer_fwd, nested
tensors): whether eager may take the fast path there, and whether the slow path, which the
recording takes instead (calls.py), computes what the fast path computes (torch's own modules
and functions, untouched: `_torch_as_defined`).  Split out of calls.py (pure move)."""
from __future__ import annotations

import operator
import types
from typing import Any

import torch

_TRANSFORMER_FILE = torch.nn.modules.transformer.__file__
_FAST_PATH_FILES = (_TRANSFORMER_FILE, torch.nn.modules.activation.__file__)


def _transformer_fast_path_possible(frame: types.FrameType) -> bool:
    """In nn.TransformerEncoder.forward (`frame`), eager may take its nested-tensor fast path:
    grad mode is off, or neither src nor the first layer's parameters require grad (with grad
    needed it takes the slow path whatever else it checks; grad mode and requires_grad are
    guarded)."""
    if not torch.is_grad_enabled():
        return True
    loc = frame.f_locals
    layer = loc.get("first_layer")
    ts = [loc.get("src")] + (list(layer.parameters()) if isinstance(layer, torch.nn.Module) else [])
    return not any(isinstance(t, torch.Tensor) and t.requires_grad for t in ts)



_MHA_FORWARD = torch.nn.MultiheadAttention.forward.__code__
_ENCODER_LAYER_FORWARD = torch.nn.TransformerEncoderLayer.forward.__code__


# methods a forward call does not reach (torch.compile's generation tagging replaces
# nn.Module.__init__ / __setstate__ for the process)
_NOT_IN_FORWARD = frozenset(("__init__", "__setstate__", "__getstate__", "__new__", "__init_subclass__",
                             "__reduce__", "__reduce_ex__", "__deepcopy__", "__copy__", "__repr__",
                             "extra_repr", "__dir__", "__class_getitem__", "__subclasshook__"))


def _methods(cls: type) -> list[tuple]:
    """What each of cls's methods resolves to: for each class in its MRO, (its __dict__, the
    dicts before it, {name: value} of the names resolved there, the names, the values). (A C
    type's own methods cannot be replaced, but a Python subclass can shadow them: torch.Tensor
    over TensorBase.)"""
    dicts = [k.__dict__ for k in cls.__mro__ if k is not object]
    seen, out = set(), []
    for j, d in enumerate(dicts):
        names = [k for k, v in d.items() if k not in seen and k not in _NOT_IN_FORWARD and
                 (callable(v) or isinstance(v, (staticmethod, classmethod, property)))]
        seen.update(names)
        out.append((d, dicts[:j], {k: d[k] for k in names}, tuple(names), tuple(d[k] for k in names)))
    return out


def _shadowed(before: list, expected: dict) -> bool:
    """A dict earlier in the MRO holds one of `expected`'s names with another value (a method
    set on a subclass; the same one set back there, as `Tensor.f = saved` does, is no change)."""
    for b in before:
        common = b.keys() & expected.keys()
        if common and any(b[k] is not expected[k] for k in common):
            return True
    return False


def _functions(ns: types.ModuleType) -> tuple:
    """(ns's __dict__, the names of its functions, the functions)."""
    d = vars(ns)
    keys = tuple(k for k, v in d.items() if callable(v) and not isinstance(v, type))
    return d, keys, tuple(d[k] for k in keys)


_SLOW_PATH_MODULES = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer, torch.nn.Linear,
                      torch.nn.modules.linear.NonDynamicallyQuantizableLinear, torch.nn.LayerNorm,
                      torch.nn.Dropout, torch.nn.ReLU, torch.nn.GELU)
# What the slow path's Python reads, as torch defined it (taken when capture is imported): the
# functions of torch.nn.functional and torch, and the methods of the module classes it calls
# and of torch.Tensor
_TORCH_AS_DEFINED = ([_functions(torch.nn.functional), _functions(torch)],
                     [m for c in _SLOW_PATH_MODULES + (torch.Tensor,) for m in _methods(c)])


def _torch_as_defined() -> bool:
    """No function of torch / torch.nn.functional and no method of the slow path's module
    classes or of torch.Tensor was replaced (on the class, a base, or added to a subclass)
    since capture was imported, and no global forward hook is registered. (~0.1 ms)"""
    functions, classes = _TORCH_AS_DEFINED
    for d, keys, values in functions:
        if not all(map(operator.is_, map(d.get, keys), values)):
            return False
    for d, before, expected, keys, values in classes:
        if not all(map(operator.is_, map(d.get, keys), values)) or _shadowed(before, expected):
            return False
    mm = torch.nn.modules.module
    return not (mm._global_forward_hooks or mm._global_forward_pre_hooks or mm._global_forward_hooks_always_called)


def _torch_replaced() -> list[str]:
    """What _torch_as_defined finds changed (names; diagnostics and tests)."""
    functions, classes = _TORCH_AS_DEFINED
    out = [k for d, keys, values in functions for k, v in zip(keys, values) if d.get(k) is not v]
    for d, before, _, keys, values in classes:
        out += [k for k, v in zip(keys, values) if d.get(k) is not v or any(b.get(k, v) is not v for b in before)]
    mm = torch.nn.modules.module
    if mm._global_forward_hooks or mm._global_forward_pre_hooks or mm._global_forward_hooks_always_called:
        out.append("<global forward hooks>")
    return out


_F_RELU, _F_GELU = torch.nn.functional.relu, torch.nn.functional.gelu


def _torch_module(m: Any, cls: type) -> bool:
    """m is an instance of exactly `cls` without a method of its own."""
    return type(m) is cls and not any(k in m.__dict__ for k in ("forward", "__call__", "_call_impl"))


def _layer_norm_over(m: Any, d: int) -> bool:
    return _torch_module(m, torch.nn.LayerNorm) and tuple(m.normalized_shape) == (d,) and \
        m.weight is not None and m.bias is not None


def _slow_path_computes_fast(layer: Any) -> bool:
    """nn.TransformerEncoderLayer `layer`'s slow path (_sa_block, _ff_block and the norms) computes
    what torch._transformer_encoder_layer_fwd computes from the same parameters: the layer and
    its submodules are torch's classes, untouched, and the activation is the one the fused
    kernel applies (activation_relu_or_gelu, set at construction: relu, or gelu without the
    tanh approximation)."""
    if not _torch_module(layer, torch.nn.TransformerEncoderLayer):
        return False
    sa, d = layer.self_attn, getattr(layer.self_attn, "embed_dim", None)
    if not (_torch_module(sa, torch.nn.MultiheadAttention) and
            all(_torch_module(getattr(layer, n), torch.nn.Dropout) for n in ("dropout", "dropout1", "dropout2")) and
            _torch_module(layer.linear1, torch.nn.Linear) and _torch_module(layer.linear2, torch.nn.Linear) and
            _layer_norm_over(layer.norm1, d) and _layer_norm_over(layer.norm2, d)):
        return False
    act, kind = layer.activation, layer.activation_relu_or_gelu
    if kind == 1:
        return act is _F_RELU or _torch_module(act, torch.nn.ReLU)
    if kind == 2:
        return act is _F_GELU or _torch_module(act, torch.nn.GELU) and act.approximate == "none"
    return False


def _slow_path_same_as_fast(frame: types.FrameType) -> bool:
    """In nn.MultiheadAttention / nn.TransformerEncoderLayer forward (`frame`), without masks,
    causal hint or nested input, the slow path computes what the fused fast-path kernel
    (torch._native_multi_head_attention, torch._transformer_encoder_layer_fwd) computes:
    projections, softmax attention (and the layer's norms and MLP); the two differ only in
    rows a mask removes entirely. There the recording takes the slow path, which compiles
    with the ops around it, where the fast path ran as an eager island between two compiled
    parts (a pre-norm block with nn.MultiheadAttention under no_grad, 1 thread: 247 us ->
    185 us, eager 328). The masks and is_causal are arguments the recording guards.
    Only where the slow path runs torch's own code: a replaced torch function or module
    method (nn.Linear.forward patched for the process: the fast path never calls it), a
    global forward hook, a subclass, or an activation other than the fused kernel's keeps
    eager's fast path. (Decided at recording: the fast path reads none of these, so the
    variant stays right if they change afterwards.)"""
    loc = frame.f_locals
    if frame.f_code is _MHA_FORWARD:
        masks, x = ("key_padding_mask", "attn_mask"), loc.get("query")
        mod_ok = _torch_module(loc.get("self"), torch.nn.MultiheadAttention)
    elif frame.f_code is _ENCODER_LAYER_FORWARD:
        masks, x = ("src_mask", "src_key_padding_mask"), loc.get("src")
        mod_ok = _slow_path_computes_fast(loc.get("self"))
    else:
        return False
    return all(loc.get(m) is None for m in masks) and loc.get("is_causal", False) is False and \
        isinstance(x, torch.Tensor) and not x.is_nested and mod_ok and _torch_as_defined()
