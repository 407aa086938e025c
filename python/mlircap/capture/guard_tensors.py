"""The tensor guard kinds (see guard_kinds.py for the three views of a guard): a tensor's
metadata (TensorMatch), many of them in one call (TensorMatchAll), and storage aliasing."""
from __future__ import annotations

from typing import Any

import torch

from . import _tensor_ext
from .guard_kinds import Consts, Guard, GuardEnv, _record


# -- tensors -------------------------------------------------------------------------
def _tensor_guards(*ts: torch.Tensor) -> Any:
    """torch's C++ TensorGuards for these example tensors (static sizes and strides)."""
    from torch._C._dynamo.guards import TensorGuards
    return TensorGuards(*ts, dynamic_dims_sizes=[list(t.shape) for t in ts],
                        dynamic_dims_strides=[list(t.stride()) for t in ts])


def _tensor_checks(*ts: torch.Tensor) -> Any:
    """One check of these example tensors' metadata: `_tensor_meta.cpp`'s TensorMetas (the
    same facts as TensorGuards at about 8 ns a tensor instead of 50-70) where it is built
    and the tensors are plain strided ones, else TensorGuards; both are `.check(*tensors)`."""
    ext = _tensor_ext.load()
    if ext is not None and len(ts) >= 2:
        try:
            return ext.TensorMetas(*ts)
        except TypeError:   # a tensor subclass with Python dispatch, symbolic sizes, ...
            pass
    return _tensor_guards(*ts)


def _tensor_meta(t: torch.Tensor) -> str:
    return (f"{type(t).__name__}[{str(t.dtype)[6:]}, {t.device}, shape={tuple(t.shape)}, "
            f"stride={tuple(t.stride())}, requires_grad={t.requires_grad}]")


@_record
class TensorMatch(Guard):
    """The tensor at `src` has the example's Python type, dispatch keys (device, autograd),
    dtype, shape, strides and requires_grad, checked in C++ by torch's TensorGuards.  A
    variant merges all of them into one TensorGuards call (TensorMatchAll)."""
    src: str
    name: str
    example: torch.Tensor
    tg: Any          # TensorGuards for the example alone
    meta: str        # the example's metadata in words

    @staticmethod
    def of(src: str, name: str, t: torch.Tensor) -> TensorMatch:
        return TensorMatch(src, name, t, _tensor_guards(t), _tensor_meta(t))

    def unchanged(self) -> bool:
        """The example still has the metadata it had when read (the recording did not
        resize it, change requires_grad, ... in place)."""
        return bool(self.tg.check(self.example))

    def code(self, k: Consts) -> str:
        return f"{k.const(self.tg)}.check({self.src})"

    def check(self, env: GuardEnv) -> bool:
        return bool(self.tg.check(env.value(self.src)))

    def describe(self) -> str:
        return f"{self.name}: {self.meta}"


@_record
class TensorMatchAll(Guard):
    """Several TensorMatch guards as one call (`_tensor_checks`: TensorMetas or TensorGuards)."""
    members: tuple[TensorMatch, ...]
    tg: Any

    @staticmethod
    def of(members: tuple[TensorMatch, ...]) -> TensorMatchAll:
        return TensorMatchAll(members, _tensor_checks(*(m.example for m in members)))

    def code(self, k: Consts) -> str:
        return f"{k.const(self.tg)}.check({', '.join(m.src for m in self.members)})"

    def check(self, env: GuardEnv) -> bool:
        return all(m.check(env) for m in self.members)

    def describe(self) -> str:
        return "tensor metadata"


def _alias_pattern(*ts: torch.Tensor) -> tuple:
    """For each tensor, the index of the first one sharing its storage."""
    first: dict[int, int] = {}
    out = []
    for i, t in enumerate(ts):
        try:
            key = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            key = -1 - i
        out.append(first.setdefault(key, i) if key else i)
    return tuple(out)


@_record
class StorageAliasing(Guard):
    """The tensors at `srcs` share storage exactly as the recorded ones did (a recording
    that wrote in place is only right for that aliasing: r08, two views of one tensor,
    one written, the other read)."""
    srcs: tuple[str, ...]
    pattern: tuple[int, ...]

    def code(self, k: Consts) -> str:
        return f"{k.const(_alias_pattern)}({', '.join(self.srcs)}) == {self.pattern!r}"

    def check(self, env: GuardEnv) -> bool:
        return _alias_pattern(*(env.value(e) for e in self.srcs)) == self.pattern

    def describe(self) -> str:
        return f"tensor arguments alias storage as when recorded {self.pattern}"
