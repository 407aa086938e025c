"""Constants and value reconstruction: the recorder's constant table and the Python
expressions that rebuild a value at replay (`_ValueMixin`)."""
from __future__ import annotations

import collections
import math
import types
from typing import Any

import torch

from .base import Unreplayable
from .classify import _IMMUTABLE_CONST, _PRIM
from .counters import _SymExpr

# How deep a value the function returns (or leaves behind) is rebuilt by replay code: objects
# count two levels each (the object, its __dict__). transformers' encoder-decoder outputs hold
# their cache four objects down (Seq2SeqModelOutput -> EncoderDecoderCache -> DynamicCache ->
# its layers -> DynamicLayer -> tensors): at 8, BartModel(input_ids) ran eagerly whole.
_MAX_DEPTH = 32

# unbound methods of C types (`torch.Generator.manual_seed`): immutable, the same object at replay
_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType)


class _ValueMixin:
    """Constants and value reconstruction for `_Recorder`: the constant table `C` of
    the generated code, literals, and `expr_of` (the replay expression of a value)."""

    # -- constants / guards -----------------------------------------------------
    def const(self, v: object, name: str | None = None) -> str:
        """`C[k]`: the index of `v` in the constant table (one entry per object)."""
        k = self.const_idx.get(id(v))
        if k is None:
            k = len(self.consts)
            self.consts.append(v)
            self.const_idx[id(v)] = k
            self.const_names[k] = name
        return f"C[{k}]"

    def _lit_or_const(self, v: object) -> str:
        return "None" if v is None else self.const(v)

    def _lit(self, v: Any) -> str:
        t = type(v)
        if v is None or t is bool:
            return repr(v)
        if t in (int, str) and len(repr(v)) < 60:
            return repr(v)
        if t is float and math.isfinite(v):
            return repr(v)
        return self.const(v)

    # -- value reconstruction --------------------------------------------------------
    def expr_of(self, v: Any, depth: int = 0) -> str:
        # In the final phase (return value + deferred writes) rebuilt mutable objects are
        # bound once, so aliasing between the result and stored state is preserved.
        memo = self.memo
        if memo is not None and type(v) not in _PRIM and not isinstance(v, torch.Tensor) and \
                id(v) not in self.src and isinstance(v, (list, dict, set, tuple)) or \
                (memo is not None and hasattr(v, "__dict__") and id(v) not in self.src and
                 not isinstance(v, (type, types.FunctionType, types.ModuleType, torch.nn.Module, torch.Tensor))):
            name = memo.get(id(v))
            if name is not None:
                return name
            e = self._expr_of(v, depth)
            name = f"_l{len(self.lets)}"
            self.lets.append((name, e))
            memo[id(v)] = name
            return name
        return self._expr_of(v, depth)

    def return_expr(self, v: Any) -> str:
        """The value the function returns: expr_of, with the ints followed to a place in it
        (flows._flow_returned: None the value itself, an index of a tuple / list or a dict's
        key built right before the return) as their expressions."""
        at = self.flow_ret_at
        if not at:
            return self.expr_of(v)
        r = at.get(None)
        if r is not None and r[0] is v:
            return r[1]

        def item(key: Any, x: Any) -> str:
            r = at.get(key)
            return r[1] if r is not None and r[0] is x else self.expr_of(x, 1)
        t = type(v)
        if t is tuple:
            return "(" + "".join(item(i, x) + ", " for i, x in enumerate(v)) + ")"
        if t is list:
            e = "[" + ", ".join(item(i, x) for i, x in enumerate(v)) + "]"
        elif t is dict:
            e = "{" + ", ".join(f"{self.expr_of(k, 1)}: {item(('key', k), x)}" for k, x in v.items()) + "}"
        else:
            return self.expr_of(v)
        if self.memo is None or id(v) in self.src:
            return self.expr_of(v)
        name = f"_l{len(self.lets)}"   # (bound once, as expr_of binds a list or dict: aliasing kept)
        self.lets.append((name, e))
        self.memo[id(v)] = name
        return name

    def _expr_of(self, v: Any, depth: int = 0) -> str:
        if isinstance(v, torch.Tensor):
            s = self.src.get(id(v))
            if s is not None:
                return s[0]
            e = self.env.get(id(v))
            if e is not None and e[0] is v:
                return self._use_node(e[1], e[2])
            raise Unreplayable("tensor of unknown origin escapes")
        t = type(v)
        fresh = self.fresh_types
        if fresh and (id(t) in fresh or id(v) in fresh and isinstance(v, type)):
            raise Unreplayable(f"a class made during the call ({(v if isinstance(v, type) else t).__name__}, by a "
                               f"class factory such as collections.namedtuple) leaves it: eager makes a new one per call")
        if self.flow_ret:   # a followed float the function returns (flows.py): its expression
            r = self.flow_ret.get(id(v))
            if r is not None and r[0] is v:
                return r[1]
        if v is None or t in _PRIM:
            return self._lit(v)
        if t is _SymExpr:
            return v.expr
        s = self.src.get(id(v))
        if s is not None:
            return s[0]
        if depth > _MAX_DEPTH:
            raise Unreplayable("value too deep")
        if t is list:
            return "[" + ", ".join(self.expr_of(x, depth + 1) for x in v) + "]"
        if t is tuple:
            return "(" + "".join(self.expr_of(x, depth + 1) + ", " for x in v) + ")"
        if t is dict:
            return "{" + ", ".join(f"{self.expr_of(k, depth + 1)}: {self.expr_of(x, depth + 1)}"
                                   for k, x in v.items()) + "}"
        if t is set:
            return "{" + ", ".join(self.expr_of(x, depth + 1) for x in v) + "}" if v else "set()"
        if isinstance(v, _IMMUTABLE_CONST) or isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type,
                                                              types.ModuleType, torch.nn.Module) + _DESCRIPTORS) \
                and not (isinstance(v, types.FunctionType) and v.__closure__):
            if isinstance(v, torch.nn.Module):
                raise Unreplayable("module created during the call")
            return self.const(v)
        if isinstance(v, tuple) and hasattr(type(v), "_fields"):
            return f"{self.const(t)}(" + ", ".join(self.expr_of(x, depth + 1) for x in v) + ")"
        if isinstance(v, tuple) and type(v).__module__ == "torch.return_types":
            return f"{self.const(t)}((" + "".join(self.expr_of(x, depth + 1) + ", " for x in v) + "))"
        if t is types.MethodType:
            return f"{self.const(types.MethodType)}({self.expr_of(v.__func__)}, {self.expr_of(v.__self__)})"
        if hasattr(v, "__dict__") and not any(getattr(k, "__slots__", ()) for k in t.__mro__) \
                and t.__module__ not in ("builtins",) \
                and not callable(v) and not isinstance(v, BaseException):
            d = {k: x for k, x in v.__dict__.items()}
            self.keep.append(d)  # temporaries must stay alive: the rebuild memo is keyed by id
            if isinstance(v, (set, frozenset)) or (isinstance(v, tuple) and not hasattr(t, "_fields")):
                raise Unreplayable(f"cannot reproduce container subclass {t.__name__}")
            if isinstance(v, dict):  # e.g. transformers ModelOutput (OrderedDict subclass)
                base = collections.OrderedDict if isinstance(v, collections.OrderedDict) else dict
                # (an OrderedDict's order is its links', not its dict storage's: move_to_end)
                items = [(k, x) for k, x in base.items(v)]
                self.keep.append(items)
                self.keep.extend(items)
                return (f"_mk({self.const(t)}, {self.expr_of(d, depth + 1)}, {self.const(base)}, "
                        f"{self.expr_of(items, depth + 1)})")
            if isinstance(v, list):
                items = list(list.__iter__(v))
                self.keep.append(items)
                return (f"_mk({self.const(t)}, {self.expr_of(d, depth + 1)}, {self.const(list)}, "
                        f"{self.expr_of(items, depth + 1)})")
            return f"_mk({self.const(t)}, {self.expr_of(d, depth + 1)})"
        if hasattr(t, "__members__"):
            return self.const(v)
        raise Unreplayable(f"cannot reproduce value of type {t.__name__}")
