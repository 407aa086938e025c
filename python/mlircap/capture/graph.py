"""FX recording: tensor operations seen by the TorchFunctionMode go into per-segment
torch.fx graphs (`_GraphMixin`, `_Seg`, `_Mode`)."""
from __future__ import annotations

import builtins
import operator
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from .base import Unreplayable
from .steps import CallStep, GraphStep
from .classify import (
    _DATA_DEP, _GLOBAL_STATE_FUNCS, _IMMUTABLE_CONST, _META_OK, _PRIM, _RNG_WORDS, _SHAPE_META, _SPLITTERS,
    _dyn_shape_op, _fname, _func_qualname,
)
from .locations import _user_location, _user_stack_trace
from .guards import _ambient
from .typeinfo import _is_constant_value, _is_frozen_dataclass, _is_ndarray, _np_float


# ----------------------------------------------------------------------------------
def _new_placeholder(seg: "_Seg") -> fx.Node:
    """Placeholders go before every computation node (some backends assume that)."""
    first = next((n for n in seg.graph.nodes if n.op != "placeholder"), None)
    if first is None:
        return seg.graph.placeholder(f"in{len(seg.ph)}")
    with seg.graph.inserting_before(first):
        return seg.graph.placeholder(f"in{len(seg.ph)}")

if TYPE_CHECKING:  # pragma: no cover
    from .recorder import _Recorder


class _Seg:
    """One captured graph (a segment of the call between graph breaks)."""

    def __init__(self, idx: int, grad: bool) -> None:
        self.idx = idx
        self.graph = fx.Graph()
        self.ph: dict[tuple, fx.Node] = {}     # key -> placeholder node
        self.inputs: list[str] = []           # python exprs producing each placeholder value
        self.examples: list[torch.Tensor] = []
        self.outputs: list[fx.Node] = []      # nodes needed later (ordered)
        self.out_set: set[fx.Node] = set()
        self.start_grad = grad
        self.grad = grad
        self.nops = 0
        self.gm: fx.GraphModule | None = None
        self.inplace = False  # records an in-place op


_fx_ok: dict[Callable, Callable] = {}


def _fx_target(f: Callable) -> Callable:
    """FX codegen names call_function targets by module + name; some torch callables
    (e.g. Tensor dunder wrappers in torch/_tensor.py) do not resolve that way.  Such
    targets are routed through a resolvable module-level trampoline."""
    try:
        r = _fx_ok.get(f)
    except TypeError:
        r = None
    if r is not None:
        return r
    from torch.fx.node import _get_qualified_name
    ok = False
    try:
        q = _get_qualified_name(f)
        mod, _, attr = q.rpartition(".")
        import importlib
        obj = None
        parts = q.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except Exception:
                continue
            for p_ in parts[i:]:
                obj = getattr(obj, p_)
            break
        ok = obj is f or obj == f
    except Exception:
        ok = False
    if ok:
        r = f
    else:
        n = len(_fx_ok)
        name = f"_fx_target_{n}_" + "".join(ch if ch.isalnum() else "_" for ch in _fname(f))

        def tramp(*a: Any, **k: Any) -> Any:
            return f(*a, **k)
        tramp.__name__ = tramp.__qualname__ = name
        tramp.__module__ = __name__
        globals()[name] = tramp
        r = tramp
    try:
        _fx_ok[f] = r
    except TypeError:
        pass
    return r


def _op_name(func: Callable) -> str:
    """A torch function's name as the user wrote it, for messages: Tensor.mul_, Tensor.data,
    torch.stack (not TensorBase.mul_, getset_descriptor.__get__, _VariableFunctionsClass.stack)."""
    if getattr(func, "__name__", None) in ("__get__", "__set__"):
        attr = getattr(getattr(func, "__self__", None), "__name__", None)
        if attr is not None:
            return f"Tensor.{attr}" + (" = ..." if func.__name__ == "__set__" else "")
    n = _func_qualname(func)
    for prefix, user in (("TensorBase.", "Tensor."), ("_VariableFunctionsClass.", "torch."),
                         ("_TensorBase.", "Tensor.")):
        if n.startswith(prefix):
            return user + n[len(prefix):]
    mod = getattr(func, "__module__", None)
    if mod and "." not in n and mod.startswith("torch"):
        return f"{mod}.{n}"
    return n


_AUTOGRAD_STATE = ("requires_grad_", "retain_grad")


class _GraphMixin:
    """FX recording for `_Recorder`: torch functions seen by `_Mode` become nodes of the
    current segment's graph; data-dependent results end the segment (graph break)."""

    # -- torch function recording --------------------------------------------------
    def on_torch(self, func: Callable, types_: tuple, args: tuple, kwargs: dict) -> Any:
        name = _fname(func)
        if func in _GLOBAL_STATE_FUNCS:
            return func(*args, **kwargs)  # grad mode is tracked per recorded op
        if name == "__iter__" and args and isinstance(args[0], torch.Tensor):
            parts = self.on_torch(torch.Tensor.unbind, types_, (args[0],), {})
            return iter(parts)
        if any(isinstance(a, torch.Generator) for a in args) or \
                any(isinstance(a, torch.Generator) for a in kwargs.values()):
            return self._generator_op(func, args, kwargs)
        res = func(*args, **kwargs)
        try:
            return self._after_torch(func, name, args, kwargs, res)
        except Exception as e:  # bookkeeping must never break the user's program
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
            return res

    def _after_torch(self, func: Callable, name: str, args: tuple, kwargs: dict, res: Any) -> Any:
        flat_res, _ = tree_flatten(res)
        has_t = any(isinstance(x, torch.Tensor) for x in flat_res)
        fs = self.flow_scalar
        if fs is not None:
            # the operator of `x * r` flows.py expects: it takes r as a graph input, or r is
            # guarded by value now (any other function: r did not reach it as expected)
            self.flow_scalar = None
            if not (has_t and name in _SCALAR_OPERATORS and len(args) == 2 and not kwargs and
                    any(a is fs[1] for a in args)):
                self._flow_escape_keys(fs[3])
                fs = None
        dyn = self._dyn_shape_args(args, kwargs)
        if not has_t and name not in ("__setitem__", "__set__", "__delitem__"):
            if name in _META_OK and not (dyn and name in _SHAPE_META):
                return res
            if name == "_assert" and args and not isinstance(args[0], torch.Tensor):
                return res   # torch._assert(cond: bool, msg): passed; cond is a traced Python value
            if name == "numpy" and len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor) and \
                    not dyn and self.np_numpy_call(args[0], res):
                return res   # tracked: its uses are recorded or break the graph (np_interop)
            # data-dependent (or unknown) non-tensor result: graph break
            reason = f"data-dependent operation Tensor.{name}()" if name in _DATA_DEP else \
                f"shape of a data-dependent-shape tensor (Tensor.{name})" if name in _META_OK else \
                f"non-tensor result of {_func_qualname(func)}"
            try:
                fe = self.const(func, _func_qualname(func))
                ae = [self.expr_of(a) for a in args]
                ke = {k: self.expr_of(v) for k, v in kwargs.items()}
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or f"{e} (an argument of {_op_name(func)})"
                return res
            k = self._call_step(fe, ae, ke, reason, external=False)
            self._add_break(reason, _user_location())
            self._data_result(k, res)
            return res
        if not self.uses_rng and any(w in name for w in _RNG_WORDS):
            self.uses_rng = True
        if name in _AUTOGRAD_STATE or name == "__set__" and \
                getattr(getattr(func, "__self__", None), "__name__", "") == "requires_grad":
            # a graph cannot make its own tensors leaves of autograd (x.detach().requires_grad_()
            # then .backward() in the function raised on replay): run the function eagerly
            self.unreplayable = self.unreplayable or "setting Tensor.requires_grad changes a tensor's autograd state"
            return res
        try:
            if dyn and (name in _SPLITTERS or name == "__iter__"):
                raise Unreplayable(f"{name} of a tensor whose shape depends on tensor data")
            if fs is not None:
                args = self._scalar_input(func, name, args, res, fs)
            elif name in _BOUND_OPS and self.flow_call is not None:
                args, kwargs = self._scalar_bounds(func, args, kwargs, res)
            if _has_np_scalar((args, kwargs)):
                args, kwargs = self._np_scalar_args(func, name, args, kwargs, res)
            self._record(func, name, args, kwargs, res)
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{e} (in {_op_name(func)})"
            return res
        if dyn or _dyn_shape_op(name, args, kwargs):
            # its shape follows tensor data: reading it is a data-dependent operation
            dyn_ids = self.__dict__.setdefault("dyn_shape", {})
            for t in flat_res:
                if isinstance(t, torch.Tensor):
                    dyn_ids[id(t)] = t
        return res

    def _generator_op(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        """A random op drawing from an explicit torch.Generator (`torch.rand(n, generator=g)`,
        `t.normal_(generator=g)`): the generator's state is not the graph's to hold, so the op
        is a replayed step between graphs, in order with the generator's other calls (its
        manual_seed), run exactly once per call; its tensor result is an input of the graph
        after it.  Same seed, same values as eager."""
        i = self.ext_seen
        self.ext_seen += 1
        if i < len(self.catchup):
            # this step already ran in a replay whose mid-replay guard then failed
            from .rng import _unlog
            res = _unlog(self.catchup[i])
        else:
            res = func(*args, **kwargs)
        reason = f"random op {_op_name(func)} with an explicit generator"
        try:
            fe = self.const(func, _func_qualname(func))
            ae = [self.expr_of(a) for a in args]
            ke = {k: self.expr_of(v) for k, v in kwargs.items()}
            if any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0]):
                raise Unreplayable("its tensor arguments require grad")
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{e} (an argument of {_op_name(func)})"
            return res
        k = self._call_step(fe, ae, ke, reason, external=True)
        self._add_break(reason, _user_location())
        self._call_result(k, res, external=True)
        return res

    def _scalar_input(self, func: Callable, name: str, args: tuple, res: Any, fs: tuple) -> tuple:
        """`x * r` with r a float computed from numbers flows.py follows (graph-break results
        `random.random()`, `t.item()`; float arguments and attributes; `1 - lam`): r becomes
        an input of the graph, a 0-d float64 tensor made from its replay expression, where
        the operator gives the same result with it; else r is guarded by value now.
        torch reads a 0-d float64 tensor as it reads a Python float, which it wraps as one:
        on the CPU the two are the same operand.  On another device the tensor is made on
        the other operand's device (a compiled graph takes its inputs there), which the
        operator reads in that operand's dtype, whereas a Python float is read in the
        operator's compute type (and `x / r` multiplies by 1 / r): the same for float32 and
        float64 operands of +, - and * only.  An integer tensor times a float differs in
        dtype: kept a constant, and r guarded."""
        _, obj, expr, ks = fs
        other = args[1] if args[0] is obj else args[0]
        dev = other.device if isinstance(other, torch.Tensor) else None
        if dev is None or not isinstance(res, torch.Tensor) or dev.type != "cpu" and \
                (other.dtype not in (torch.float32, torch.float64) or name not in _SCALAR_OPERATORS_ANY_DEVICE):
            self._flow_escape_keys(ks)
            return args
        mk = _int_scalar_tensor if type(obj) is int else _scalar_tensor   # (an int: flows.py counters, .item())
        t = mk(obj, None if dev.type == "cpu" else dev)
        args2 = tuple(t if a is obj else a for a in args)
        try:
            res2 = func(*args2)
        except Exception:
            res2 = None
        if res2 is None or not _same_result(res, res2):
            self._flow_escape_keys(ks)
            return args
        self.keep.append(t)
        made = f"{self.const(mk)}({expr})" if dev.type == "cpu" else f"{self.const(mk)}({expr}, {self.const(dev)})"
        self.src[id(t)] = (made, f"<{_pretty_flow(expr)} as a graph input>", True)
        for k in ks:   # this use needs no guard (close_flows)
            self.flows_scalar.pop(k, None)
        return args2

    def _scalar_bounds(self, func: Callable, args: tuple, kwargs: dict, res: Any) -> tuple[tuple, dict]:
        """`x.clamp(-3 * s, 3 * s)` with s followed by flows.py (`s = float(x.std())`) and
        called right from the user's frame: the bounds become graph inputs (0-d float64
        tensors on x's device), as `_scalar_input` makes them for `x * s`.  torch casts a
        bound, a Python float or a 0-d tensor, to x's dtype: the same for float32 and
        float64 x on any device (not assumed for other dtypes: they stay constants)."""
        fc = self.flow_call
        f = sys._getframe(1)
        while f is not None and (f.f_code.co_filename.startswith(_CAPTURE_DIR) or
                                 f.f_code.co_filename == _OVERRIDES_FILE):
            f = f.f_back
        x = args[0] if args else None
        if f is not fc[0] or f.f_lasti != fc[1] or not isinstance(x, torch.Tensor) or \
                x.dtype not in (torch.float32, torch.float64) or not isinstance(res, torch.Tensor):
            return args, kwargs
        exprs, dev = fc[2], None if x.device.type == "cpu" else x.device
        made: dict[int, torch.Tensor] = {}

        def sub(v: Any) -> Any:
            if id(v) in exprs and (type(v) is float or _np_float(v)):
                made[id(v)] = made.get(id(v)) or _scalar_tensor(v, dev)
                return made[id(v)]
            return v
        args2 = (x,) + tuple(sub(a) for a in args[1:])
        kwargs2 = {k: sub(v) for k, v in kwargs.items()}
        if len(made) != len(exprs):   # a followed value it takes otherwise (or elsewhere)
            return args, kwargs
        try:
            res2 = func(*args2, **kwargs2)
        except Exception:
            return args, kwargs
        if not _same_result(res, res2):
            return args, kwargs
        for vid, t in made.items():
            self.keep.append(t)
            e = exprs[vid]
            c = f"{self.const(_scalar_tensor)}({e})" if dev is None else f"{self.const(_scalar_tensor)}({e}, {self.const(dev)})"
            self.src[id(t)] = (c, f"<{_pretty_flow(e)} as a graph input>", True)
        self.flows_used.update(fc[3])   # taken by the graph: no guard (close_flows)
        return args2, kwargs2

    def _np_scalar_args(self, func: Callable, name: str, args: tuple, kwargs: dict, res: Any) -> tuple:
        """NumPy scalars among the arguments (`x * np.sqrt(d)`, `y[:, :np.int64(2)]`) become
        the Python numbers they hold, which the graph can hold as constants.  torch reads
        both the same except where it infers a dtype from them (`torch.tensor(np.float32(1))`
        is float32, of 1.0 float32 too, but of np.float64 float64): the operation is run again
        with the Python numbers (and else with the dtype of its result) and must give the same
        result (in-place and random operations are not run twice: for them only the exact
        Python types, float64 / int64 / bool_, convert)."""
        args2, kwargs2 = _py_scalars(args), _py_scalars(kwargs)
        once = name.endswith("_") and not name.endswith("__") or name in ("__setitem__", "__set__") or \
            any(w in name for w in _RNG_WORDS)
        if once:
            flat, _ = tree_flatten((args, kwargs))
            if all(type(x).__name__ in ("float64", "int64", "bool_") for x in flat if _is_np_scalar(x)):
                return args2, kwargs2
        else:
            tries = [kwargs2]
            if isinstance(res, torch.Tensor) and "dtype" not in kwargs:
                tries.append(dict(kwargs2, dtype=res.dtype))   # the dtype torch inferred from it
            for kw in tries:
                try:
                    res2 = func(*args2, **kw)
                except Exception:
                    continue
                if _same_result(res, res2):
                    return args2, kw
        raise Unreplayable(f"numpy scalar argument to {name} whose dtype the result depends on")

    def _dyn_shape_args(self, args, kwargs) -> bool:
        """Whether a tensor argument's shape depends on tensor data (see `_dyn_shape_op`)."""
        dyn_ids = self.__dict__.get("dyn_shape")
        if not dyn_ids:
            return False
        flat, _ = tree_flatten((args, kwargs))
        return any(isinstance(t, torch.Tensor) and dyn_ids.get(id(t)) is t for t in flat)

    def _seg(self) -> _Seg:
        if self.cur is None:
            self.cur = _Seg(len(self.segs), self.grad0)
            self.segs.append(self.cur)
            self.steps.append(GraphStep(self.cur))
        return self.cur

    def _call_step(self, fe: str, ae: list[str], ke: dict[str, str], reason: str, external: bool) -> int:
        """Ends the open graph segment and records a call replayed outside graphs
        (its arguments as replay expressions); returns its call number."""
        self._close_seg()
        k = self.ncalls
        self.ncalls += 1
        self.steps.append(CallStep(k, fe, ae, ke, reason, external=external))
        return k

    def _hoisted_step(self, fe: str, ae: list[str], ke: dict[str, str], reason: str) -> int | None:
        """A draw from a Python or NumPy RNG (`random.random()`, `rs.uniform(0.9, 1.1)`) with
        no tensor argument, met inside a graph: it touches nothing but its generator's state,
        so the replay runs it before the open graph instead of splitting the graph there (as
        Dynamo runs Python random draws before its graph).  The guards placed after it (the
        branch it decides) are then checked before that graph runs.  Not when the graph so far
        draws from torch's RNG: a replay that misses after the draw logs the torch RNG state
        it left (rng.py), which must be the state after those draws.  None: not hoisted."""
        seg = self.cur
        if seg is None or not seg.nops:
            return None
        for n in seg.graph.nodes:
            if n.op == "call_function" and any(w in _fname(n.target) for w in _RNG_WORDS):
                return None
        at = next((i for i in range(len(self.steps) - 1, -1, -1)
                   if isinstance(self.steps[i], GraphStep) and self.steps[i].seg is seg), None)
        if at is None:
            return None
        k = self.ncalls
        self.ncalls += 1
        self.steps.insert(at, CallStep(k, fe, ae, ke, reason, external=True))
        return k

    def _close_seg(self) -> None:
        seg = self.cur
        if seg is None:
            return
        if seg.grad != seg.start_grad:
            seg.graph.call_function(torch._C._set_grad_enabled, (seg.start_grad,))
            seg.grad = seg.start_grad
        self.cur = None

    def _arg_node(self, seg: _Seg, t: torch.Tensor) -> fx.Node:
        e = self.env.get(id(t))
        if e is not None and e[0] is t:
            _, si, node = e
            if si == seg.idx:
                return node
            key = ("node", si, node)
            ph = seg.ph.get(key)
            if ph is None:
                ph = _new_placeholder(seg)
                seg.ph[key] = ph
                seg.inputs.append(self._use_node(si, node))
                seg.examples.append(t)
            return ph
        s = self.src.get(id(t))
        if s is None:
            what = f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
            if isinstance(t, torch.nn.Parameter):
                raise Unreplayable(f"parameter ({what}) reached through an untracked path")
            raise Unreplayable(f"tensor ({what}) of unknown origin (created outside the traced code)")
        key = ("src", s[0])
        ph = seg.ph.get(key)
        if ph is None:
            ph = _new_placeholder(seg)
            seg.ph[key] = ph
            seg.inputs.append(s[0])
            seg.examples.append(t)
        return ph

    def _use_node(self, si: int, node: fx.Node) -> str:
        seg = self.segs[si]
        if node not in seg.out_set:
            seg.out_set.add(node)
            seg.outputs.append(node)
        return f"n{si}_{node.name}"

    def _record(self, func: Callable, name: str, args: tuple, kwargs: dict, res: Any) -> None:
        if _ambient() != self.amb0:
            raise Unreplayable("autocast / inference_mode changed inside the captured code")
        seg = self._seg()
        g = torch.is_grad_enabled()
        if g != seg.grad:
            seg.graph.call_function(torch._C._set_grad_enabled, (g,))
            seg.grad = g

        def conv(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return self._arg_node(seg, x)
            if isinstance(x, tuple) and hasattr(type(x), "_make"):
                # a named tuple: a constant when it holds only constants (an options object),
                # else one holding the graph's values
                return x if _is_constant_value(x) and not _has_dataclass(x) else type(x)._make(conv(y) for y in x)
            if isinstance(x, (list, tuple)):
                r = [conv(y) for y in x]
                return type(x)(r) if type(x) in (list, tuple) else tuple(r)
            if isinstance(x, dict):
                return {k: conv(v) for k, v in x.items()}
            if type(x) in _PRIM or isinstance(x, _IMMUTABLE_CONST) or isinstance(x, (torch.dtype,)):
                return x
            if _is_constant_value(x):
                # an options object (frozen dataclass, enum member): a constant; FX writes
                # dataclasses as code it cannot run, so those are bound to the target (below)
                if _has_dataclass(x):
                    raise Unreplayable(f"frozen dataclass {type(x).__name__} inside an argument to {name}")
                return x
            if isinstance(x, (torch.Generator,)):
                raise Unreplayable("explicit torch.Generator argument")
            if name in ("__getitem__", "__setitem__") and _is_ndarray(x) and not x.dtype.hasobject:
                s = self.src.get(id(x))
                if s is not None and s[2] != "opaque":
                    # an index array with a source (guarded by contents, or computed from
                    # such): the graph takes it as a tensor input, as indexing converts it
                    t = torch.as_tensor(x)
                    self.keep.append(t)
                    self.src[id(t)] = (f"{self.const(torch.as_tensor)}({s[0]})", f"torch.as_tensor({s[1]})", s[2])
                    return self._arg_node(seg, t)
            if callable(x) or isinstance(x, (types.ModuleType,)):
                return x
            raise Unreplayable(f"unsupported argument of type {type(x).__name__} to {name}")
        bind = {i: a for i, a in enumerate(args) if _has_dataclass(a) and _is_constant_value(a)}
        bind_kw = {k: v for k, v in kwargs.items() if _has_dataclass(v) and _is_constant_value(v)}
        cargs = tuple(None if i in bind else conv(a) for i, a in enumerate(args))
        ckw = {k: conv(v) for k, v in kwargs.items() if k not in bind_kw}
        target = func if not (bind or bind_kw) else _bind_constants(func, bind, bind_kw)
        if getattr(func, "__name__", None) in ("__get__", "__set__"):
            attr = getattr(getattr(func, "__self__", None), "__name__", None)
            if attr is None:
                raise Unreplayable(f"descriptor {func!r}")
            if func.__name__ == "__get__":
                target, cargs, ckw = builtins.getattr, (cargs[0], attr), {}
            else:
                target, cargs, ckw = builtins.setattr, (cargs[0], attr, cargs[1]), {}
        if name.endswith("_") and not name.endswith("__") or name in ("__setitem__", "__set__", "copy_"):
            self.has_inplace = True
            seg.inplace = True
        if target is builtins.getattr and cargs[1] == "data" and isinstance(res, torch.Tensor):
            # t.data has a version counter of its own: writes through it (or its views) leave
            # t._version as it was, so they are found by the alias's version instead
            base = self.data_aliases.get(id(args[0]), (None, args[0]))[1]
            if id(base) in self.versions:
                self.data_aliases[id(res)] = (res, base, res._version)
        node = seg.graph.call_function(_fx_target(target), cargs, ckw)
        trace = _user_stack_trace()
        if trace:
            node.meta["stack_trace"] = trace
        seg.nops += 1
        if isinstance(res, torch.Tensor):
            self.env[id(res)] = (res, seg.idx, node)
            self.keep.append(res)
        elif isinstance(res, (tuple, list)):
            for i, r in enumerate(res):
                if isinstance(r, torch.Tensor):
                    gi = seg.graph.call_function(operator.getitem, (node, i))
                    self.env[id(r)] = (r, seg.idx, gi)
                    self.keep.append(r)
                elif isinstance(r, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in r):
                    raise Unreplayable(f"nested tensor containers returned by {name}")
        elif res is not None:
            raise Unreplayable(f"unsupported result type {type(res).__name__} of {name}")


# the torch functions Python's arithmetic operators on a tensor and a float run
_SCALAR_OPERATORS = {"mul", "add", "sub", "div", "rsub", "true_divide", "__mul__", "__rmul__", "__add__",
                     "__radd__", "__sub__", "__rsub__", "__truediv__", "__rtruediv__", "__div__", "__rdiv__"}


# ... of those, the ones where a 0-d float64 tensor on the other operand's device gives what a
# Python float gives on any device, for a float32 or float64 operand (graph.py _scalar_input)
_SCALAR_OPERATORS_ANY_DEVICE = {"mul", "add", "sub", "rsub", "__mul__", "__rmul__", "__add__", "__radd__",
                                "__sub__", "__rsub__"}


# torch functions taking float bounds, which graph.py _scalar_bounds makes graph inputs
_BOUND_OPS = {"clamp", "clip", "clamp_min", "clamp_max"}
_CAPTURE_DIR = __file__.rsplit("/", 1)[0] + "/"
_OVERRIDES_FILE = torch.overrides.__file__


def _scalar_tensor(v: float, device: torch.device | None = None) -> torch.Tensor:
    """A float graph input (graph.py _scalar_input) as the graph takes it (a normal tensor
    also under inference_mode: graphs read their inputs' version counters).  On a device
    other than the CPU made by a fill (the value a kernel argument: no host-to-device copy)."""
    if torch.is_inference_mode_enabled():
        with torch.inference_mode(False):
            return _scalar_tensor(v, device)
    if device is None:
        return torch.tensor(float(v), dtype=torch.float64)
    return torch.full((), float(v), dtype=torch.float64, device=device)


def _int_scalar_tensor(v: int, device: torch.device | None = None) -> torch.Tensor:
    """An int graph input: a 0-d int64 tensor, the operand torch makes of a Python int (a
    wrapped int64 number: the same promotion for a dimensioned tensor, the same value cast
    to the compute type).  The replay's expression of a value recorded as an int is an int
    (its operands' types are guarded)."""
    if type(v) is not int:
        raise TypeError(f"mlircap.capture: an int graph input evaluated to {type(v).__name__}")
    if torch.is_inference_mode_enabled():
        with torch.inference_mode(False):
            return _int_scalar_tensor(v, device)
    if device is None:
        return torch.tensor(v, dtype=torch.int64)
    return torch.full((), v, dtype=torch.int64, device=device)


def _pretty_flow(expr: str) -> str:
    import re
    return re.sub(r"\bb(\d+)\b", r"<result of break \1>", expr)


def _has_dataclass(x: Any) -> bool:
    return _is_frozen_dataclass(x) or isinstance(x, tuple) and any(_has_dataclass(y) for y in x)


def _bind_constants(func: Callable, args: dict[int, Any], kwargs: dict[str, Any]) -> Callable:
    """func with the constant arguments FX cannot write as code (frozen dataclasses: a
    torch function's options object) bound: the graph passes None in their places."""
    def bound(*a: Any, **k: Any) -> Any:
        a2 = list(a)
        for i, v in args.items():
            a2[i] = v
        return func(*a2, **k, **kwargs)
    bound.__name__ = bound.__qualname__ = f"{_fname(func)}_with_constants"
    return bound


def _is_np_scalar(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.generic) and x.dtype.kind in "biufc"


def _has_np_scalar(tree: Any) -> bool:
    flat, _ = tree_flatten(tree)
    return any(_is_np_scalar(x) or (type(x) is slice and any(_is_np_scalar(v) for v in (x.start, x.stop, x.step)))
               for x in flat)


def _py_scalars(tree: Any) -> Any:
    if _is_np_scalar(tree):
        return tree.item()
    if type(tree) is slice:
        return slice(*(_py_scalars(v) for v in (tree.start, tree.stop, tree.step)))
    if type(tree) in (list, tuple):
        return type(tree)(_py_scalars(x) for x in tree)
    if type(tree) is dict:
        return {k: _py_scalars(v) for k, v in tree.items()}
    return tree


def _same_result(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and \
            a.requires_grad == b.requires_grad and torch.equal(torch.nan_to_num(a.detach()), torch.nan_to_num(b.detach()))
    if type(a) in (list, tuple) or isinstance(a, tuple):
        return type(a) is type(b) and len(a) == len(b) and all(_same_result(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


class _Mode(TorchFunctionMode):
    """Routes every torch function called while recording to the recorder."""

    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func: Callable, types_: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        rec = self.rec
        if rec.suspended or rec.ext_depth or rec.stopped:
            return func(*args, **kwargs)
        rec.suspended += 1
        try:
            return rec.on_torch(func, types_, args, kwargs)
        finally:
            rec.suspended -= 1
