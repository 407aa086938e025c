"""Torch calls as the recording's TorchFunctionMode sees them: `_Mode`, which routes every
torch function called while recording to the recorder (graph.py), and what a call is, read
off its function and arguments: tables of the functions that write .grad, autograd state or
running statistics, and predicates (a cuDNN RNN dropping out between layers, an op inside a
custom autograd.Function's forward, torch.equal of plain tensors, tensor bounds of a slice
and tensor counts of a splitter, a raise decided by guarded metadata, a resize keeping the
first elements).  Split out of graph.py (pure move)."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ..frontend import resize_keeps_prefix
from .classify import _DATA_DEP, _func_qualname
from .fx_targets import _op_name

if TYPE_CHECKING:  # pragma: no cover
    from .recorder import _Recorder

_functorch_level = torch._C._functorch.peek_interpreter_stack


def _same_view(t: Any, v: Any) -> bool:
    """v views exactly t's elements as t does (`t.data`, written in place): `t.data = v`
    changes nothing of t."""
    return isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.layout == v.layout == torch.strided \
        and not v.requires_grad and t.dtype == v.dtype and t.device == v.device and t.shape == v.shape and \
        t.stride() == v.stride() and t.storage_offset() == v.storage_offset() and \
        t.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()


_AUTOGRAD_STATE = ("requires_grad_", "retain_grad")
# torch functions writing the .grad of autograd leaves (replay_helpers._save_grads)
_GRAD_WRITERS = (torch.Tensor.backward, torch.autograd.backward)
_RNNS = frozenset({torch._VF.lstm, torch._VF.gru, torch._VF.rnn_tanh, torch._VF.rnn_relu})


def _cudnn_rnn_dropout(func: Callable, args: tuple) -> bool:
    """A multi-layer RNN call with dropout in training on the GPU (`torch._VF.lstm(input,
    hx, params, has_biases, num_layers, dropout, train, ...)`, or its packed form with
    batch_sizes after the data): cuDNN drops out between layers with its own generator
    state, which no compiled graph can draw the same values from."""
    if func not in _RNNS or len(args) < 8 or not isinstance(args[0], torch.Tensor) or not args[0].is_cuda:
        return False
    off = 0 if isinstance(args[3], bool) else 1
    num_layers, dropout, train = args[4 + off], args[5 + off], args[6 + off]
    return bool(train) and isinstance(dropout, (int, float)) and dropout > 0 and num_layers > 1
# torch functions writing their running-statistics arguments without a version bump
_UNVERSIONED_WRITERS = {"batch_norm", "instance_norm", "native_batch_norm", "_native_batch_norm_legit"}


_FUNCTION_APPLY = torch.autograd.function.Function.apply.__func__.__code__


def _custom_function_forward(args: tuple, kwargs: dict) -> bool:
    """Whether an op runs inside a custom autograd.Function's forward (Function.apply
    up the stack) on a tensor that requires grad."""
    if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0]):
        return False
    f = sys._getframe(1)
    for _ in range(64):
        if f is None:
            return False
        if f.f_code is _FUNCTION_APPLY:
            return True
        f = f.f_back
    return False


class _RaisesAs:
    """Runs `func` and tells whether it raised `exc` (as it did when recorded: `_raised`)."""

    __slots__ = ("func", "exc")

    def __init__(self, func: Callable, exc: type) -> None:
        self.func, self.exc = func, exc

    def __call__(self, *args: Any, **kwargs: Any) -> bool:
        try:
            self.func(*args, **kwargs)
        except self.exc:
            return True
        except Exception:  # another error: not the recorded path either
            return False
        return False

    def __repr__(self) -> str:
        return f"raises({_func_qualname(self.func)}, {self.exc.__name__})"


def _plain_equal_operands(args: tuple, kwargs: dict) -> bool:
    """torch.equal(a, b) of dense tensors on one device (other devices raise: left to eager's
    call), whose value is eq(a, b).all() where the shapes are the same, else False."""
    if kwargs or len(args) != 2 or not all(type(a) in (torch.Tensor, torch.nn.Parameter) for a in args):
        return False
    a, b = args
    return a.device == b.device and a.layout == b.layout == torch.strided and \
        not (a.is_quantized or b.is_quantized or a.is_nested or b.is_nested)

def _tensor_in_slice(index: Any) -> bool:
    """A slice of `index` (or of its tuple) has a tensor start, stop or step."""
    if isinstance(index, tuple):
        return any(_tensor_in_slice(i) for i in index)
    return isinstance(index, slice) and any(
        isinstance(b, torch.Tensor) and b.numel() == 1 and not (b.is_floating_point() or b.is_complex())
        for b in (index.start, index.stop, index.step))


def _count_tensor(name: str, a: Any) -> bool:
    """`a` is a tensor a splitter `name` reads as an int (a count, a size or a dim): an integer
    tensor of one element (tensor_split and the h/v/dsplit family read a 1-d tensor as a list
    of indices: only a 0-d one is an int there)."""
    return isinstance(a, torch.Tensor) and a.numel() == 1 and not (a.is_floating_point() or a.is_complex()) and \
        (a.dim() == 0 or name not in ("tensor_split", "hsplit", "vsplit", "dsplit"))


def _count_tensor_args(name: str, args: tuple, kwargs: dict) -> bool:
    return any(_count_tensor(name, a) for a in args[1:]) or any(_count_tensor(name, v) for v in kwargs.values())


# Autograd metadata no tensor guard covers, as the replay reads it ({} the tensor)
_AUTOGRAD_META = {"is_leaf": "{}.is_leaf", "grad_fn": "{}.grad_fn", "retains_grad": "{}.retains_grad",
                  "output_nr": "{}.output_nr", "_is_view": "{}._is_view()"}


# Torch functions whose failure (a view of a non-contiguous layout, mismatched shapes) is
# decided by their tensors' metadata alone, by where those tensors may appear: the first
# argument, the first two, or the tensors of a first-argument list
_META_RAISERS = {
    **dict.fromkeys(("view", "reshape", "expand", "permute", "transpose", "flatten", "unflatten", "narrow",
                     "select", "squeeze", "unsqueeze", "movedim", "split", "chunk", "unfold", "t", "diagonal",
                     "size", "stride", "broadcast_to", "unbind", "tensor_split"), 1),
    **dict.fromkeys(("view_as", "expand_as", "reshape_as", "mm", "matmul", "__matmul__", "bmm", "mv", "dot"), 2),
    **dict.fromkeys(("cat", "concat", "concatenate", "stack", "hstack", "vstack", "broadcast_tensors"), 0),
}


def _raise_from_metadata(name: str, args: tuple, kwargs: dict, dyn: dict, known: Callable) -> bool:
    """Whether `name(*args, **kwargs)` raising is decided by guarded metadata: an op of
    `_META_RAISERS` whose tensors are where that table allows, each a value of the graph or a
    guarded input (`known`), none of data-dependent shape."""
    n = _META_RAISERS.get(name)
    if n is None or any(isinstance(t, torch.Tensor) for t in tree_flatten(kwargs)[0]):
        return False
    if n == 0:
        if not args or not isinstance(args[0], (list, tuple)) or \
                not all(isinstance(t, torch.Tensor) for t in args[0]):
            return False
        operands, rest = list(args[0]), args[1:]
    else:
        operands, rest = list(args[:n]), args[n:]
        if not all(isinstance(t, torch.Tensor) for t in operands):
            return False
    if any(isinstance(t, torch.Tensor) for t in tree_flatten(rest)[0]):
        return False
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) and dyn.get(id(t)) is not t and known(t)
               for t in operands)


def _shrinking_resize(name: str, args: tuple, kwargs: dict) -> bool:
    """`t.resize_(shape)` / `t.resize_as_(other)` that keeps t's first elements in order
    (frontend.resize_keeps_prefix), which the graph computes as eager (the frontend's rewrite
    of aten.resize: OpInfo resize_ / resize_as_ of a clone). A growing resize (new elements
    uninitialized) or one of a strided tensor (its storage read at other positions) still
    runs the function eagerly (_inner_metadata)."""
    if name not in ("resize_", "resize_as_") or len(args) != 2:
        return False
    size = args[1] if name == "resize_" else tuple(args[1].shape) if isinstance(args[1], torch.Tensor) else None
    return resize_keeps_prefix(args[0], size, kwargs.get("memory_format"))


def _metadata(t: torch.Tensor) -> tuple:
    return t.dtype, t.shape, t.stride(), t.storage_offset()


class _Mode(TorchFunctionMode):
    """Routes every torch function called while recording to the recorder."""

    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func: Callable, types_: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        rec = self.rec
        if rec.suspended or rec.ext_depth or rec.stopped:
            if rec.ext_watch is not None and getattr(func, "__name__", None) in _DATA_DEP:
                rec.ext_watch.append(func)   # (special_calls._vmap_node: tensor data read as a Python value)
            return func(*args, **kwargs)
        if _functorch_level() is not None:
            # under a torch.func transform the recording did not see start (torch code that runs
            # one): its tensors are the transform's wrapped ones, which no graph holds
            rec.unreplayable = rec.unreplayable or f"{_op_name(func)} under a torch.func transform"
            return func(*args, **kwargs)
        rec.suspended += 1
        try:
            return rec.on_torch(func, types_, args, kwargs)
        finally:
            rec.suspended -= 1
