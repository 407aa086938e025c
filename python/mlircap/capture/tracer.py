"""The opcode tracer: `sys.settrace` callbacks and one handler per opcode that reads
external state (globals, attributes, cells) or calls something (`_TracerMixin`)."""
from __future__ import annotations

import contextvars
import copy
import sys
import types
from collections.abc import Callable
from typing import Any
import logging
from logging import Logger as logging_Logger

import torch

from ._bytecode import _CHECK_DEPTH, _instrs
from .base import Unreplayable, _Canned, _MISSING
from .guard_kinds import ClassAttr, Equals, Keys, Lengths, NoClassAttr, NoKey, TypeIs
from .steps import CallStep
from .frame_hook import _E, _E_real, _NULL
from .classify import (_MODULE_WALKERS, _PRIM, _WRITE_ONLY, _call_kind, _classify, _func_qualname,
                       _global_state_writer)
from .locations import _frame_loc
from .typeinfo import _class_dicts, _is_data_descr, _is_ndarray, _is_opaque_value, _mro_lookup
from .side_effects import _SideEffectMixin
from .rng import _unlog
from .special_calls import _SpecialCallMixin, _is_context_manager
from .counters import _CounterMixin
from .flows import _FlowMixin


def _touch_ops(*ns: int) -> Callable[..., None]:
    def h(self: Any, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        if self.lazy:
            for n in ns:
                try:
                    o = _E.peek(frame, n)
                except IndexError:
                    continue
                if id(o) in self.lazy:
                    self.touch(o)
    return h


class _TracerMixin(_SpecialCallMixin, _CounterMixin, _FlowMixin):
    """Opcode tracing for `_Recorder`: the settrace callbacks, handlers for opcodes that
    read external state, and calls (safe, mutating, or uncapturable: a graph break)."""

    # -- opcode tracing -----------------------------------------------------------
    def global_trace(self, frame: types.FrameType, event: str, arg: Any) -> Callable | None:
        if event != "call" or self.suspended or self.ext_depth or self.stopped:
            return None
        if _classify(frame.f_code) != "user":
            return None
        frame.f_trace_lines = False
        frame.f_trace_opcodes = True
        code = frame.f_code
        try:
            self._hook_guard(frame, code)
        except Exception as e:
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
        return self.local_trace

    def global_profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        """sys.setprofile callback while recording: C calls from code the tracer does not see
        (untraced library code; not an uncapturable call, which is replayed whole, nor the
        recorder itself) that write process-wide state make the recording unreplayable."""
        if event != "c_call" or self.suspended or self.ext_depth or self.stopped or self._unreplayable:
            return
        what = _global_state_writer(arg)
        if what is not None:
            self.unreplayable = (f"untraced library code {frame.f_code.co_name} ({_frame_loc(frame)}) "
                                 f"changed {what} (through {getattr(arg, '__qualname__', arg)})")

    def _hook_guard(self, frame: types.FrameType, code: types.CodeType) -> Callable:
        if code.co_argcount and code.co_name == "forward":
            self_ = _E.local_raw(frame, 0)
            s = self.src.get(id(self_))
            if s is not None and isinstance(self_, torch.nn.Module) and id(self_) not in self.hooked:
                self.hooked.add(id(self_))
                hs = [self_._forward_hooks, self_._forward_pre_hooks, self_._backward_hooks,
                      self_._backward_pre_hooks]
                n = tuple(len(h) for h in hs)
                self.guard(Lengths(tuple(hs), n, s[1]))
                # what `forward` resolves to (class monkeypatching, instance attribute); the
                # root module's frame is only dispatched here when its code is the captured one
                d = self_.__dict__
                if self.args and self_ is self.args[0] and code is self.code:
                    pass
                elif "forward" in d:
                    self.read(f"{self.const(d)}['forward']", f"{s[1]}.forward", d["forward"], id(self_),
                              "forward", group=(d,))
                else:
                    self._class_attr(self_, "forward", s[1])
                if not self.hooked_global:
                    self.hooked_global = True
                    mm = torch.nn.modules.module
                    gs = [mm._global_forward_hooks, mm._global_forward_pre_hooks, mm._global_backward_hooks,
                          mm._global_backward_pre_hooks, mm._global_forward_hooks_always_called]
                    n = tuple(len(x) for x in gs)
                    self.guard(Lengths(tuple(gs), n, "global nn.Module"))
        return self.local_trace

    def local_trace(self, frame: types.FrameType, event: str, arg: Any) -> Callable | None:
        if self.stopped:
            return None
        self.suspended += 1
        try:
            if event == "opcode":
                ins = _instrs(frame.f_code).get(frame.f_lasti)
                if ins is not None:
                    self.cur_depth = ins[3]
                    if _CHECK_DEPTH and ins[3] != _E_real.stack_depth(frame):
                        raise AssertionError(f"static stack depth {ins[3]} != {_E_real.stack_depth(frame)} "
                                             f"at {ins[0]} {frame.f_code.co_name}:{frame.f_lasti}")
                p = self.pending.pop(frame, None)
                if p is not None:
                    p(frame)
                if ins is not None and self.suspended == 1 and not self.ext_depth:
                    if self.np_env and self.np_opcode(frame, ins):
                        return self.local_trace   # a NumPy operation the graph records
                    h = _HANDLERS.get(ins[0])
                    if h is not None:
                        h(self, frame, ins[1], ins[2])
            elif event == "exception" or event == "return":
                if event == "return" and frame.f_code is self.code:
                    self.return_loc = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                p = self.pending.pop(frame, None)
                if p is not None and getattr(p, "is_call", False):
                    self.ext_depth -= 1
                    self.unreplayable = self.unreplayable or "exception raised by an uncapturable call"
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or str(e)
        except AssertionError:
            raise
        except Exception as e:  # never let the recorder break the user's program
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
        finally:
            self.suspended -= 1
        return self.local_trace

    def op_load_global(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        g = frame.f_globals
        if name not in g:
            # resolved to a builtin: guard (once per module, at the end) that the module
            # does not shadow it later, and that builtins[name] is still the same object
            self.builtin_reads.setdefault(id(g), (g, set()))[1].add(name)
            if self.ncalls == 0:
                self._group_key((g,))  # pin the globals' version as of this read
            b = frame.f_builtins
            if name in b:
                self.read(f"{self.const(b)}[{name!r}]", f"builtins.{name}", b[name], id(b), name, group=(b,))
            return
        if (id(g), name) in self.dirty:
            return
        c = self.const(g, f"globals of {g.get('__name__')}")
        self.read(f"{c}[{name!r}]", f"G[{name!r}]", g[name], id(g), name, group=(g,))

    def op_load_attr(self, frame: types.FrameType | None, arg: int | None, name: str, obj: Any = _NULL) -> None:
        if obj is _NULL:
            obj = _E.peek(frame, 0)
        s = self.src.get(id(obj))
        if isinstance(obj, torch.Tensor):
            self._tensor_attr(obj, name, s)
            return
        if s is None or type(obj) in _PRIM:
            return
        expr, pretty, kind = s
        if kind == "opaque":
            if callable(_mro_lookup(type(obj), name)[1]) and name not in getattr(obj, "__dict__", ()):
                return   # a method of its (guarded) type: calling it is a replayed call
            raise Unreplayable(f"attribute {name!r} read from an opaque value returned by an uncapturable call")
        if (id(obj), name) in self.counters and self._counter_read(frame, obj, obj.__dict__, name, "", pretty, ()):
            return
        if (id(obj), name) in self.dirty:
            return
        if name == "__dict__":
            d = getattr(obj, "__dict__", None)
            if id(obj) in self.lazy_objs:
                self.full_obj(obj)
            if isinstance(d, dict):
                self.read(f"{expr}.__dict__", f"vars({pretty})", d)
            return
        if isinstance(obj, torch.nn.Module):
            d = obj.__dict__
            _, raw = _mro_lookup(type(obj), name)
            if raw is not _MISSING and (_is_data_descr(raw) or name not in d):
                # property / method / class data: a getter itself is traced; the class
                # attribute is guarded against monkeypatching and instance shadowing
                self._class_attr(obj, name, pretty)
                return
            # the module is identity-guarded, so its attribute dicts are bound as constants
            if name in d and type(d[name]) is int and \
                    self._counter_read(frame, obj, d, name, f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", (d,)):
                return
            if name in d:
                self.read(f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
                return
            for store in ("_parameters", "_buffers", "_modules"):
                sd = d.get(store)
                if sd is not None and name in sd:
                    self.read(f"{self.const(sd)}[{name!r}]", f"{pretty}.{name}", sd[name], id(obj), name,
                              group=(sd,))
                    return
            return
        if isinstance(obj, types.ModuleType):
            d = obj.__dict__
            if name in d:
                self.read(f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
            return
        if isinstance(obj, type):
            try:
                v = getattr(obj, name)
            except Exception:
                return
            self.read(f"{expr}.{name}", f"{pretty}.{name}", v, id(obj), name,
                      group=_class_dicts(obj) if expr.startswith("C[") else None)
            return
        if _is_ndarray(obj):
            return  # guarded by contents
        argrooted = kind is True
        cls = type(obj)
        _, raw = _mro_lookup(cls, name)
        if raw is not _MISSING and _is_data_descr(raw):
            if type(raw) in (types.MemberDescriptorType, types.GetSetDescriptorType):
                # __slots__ member / C getset: the value read is the state to guard
                try:
                    v = getattr(obj, name)
                except Exception:
                    return
                self.read(f"{expr}.{name}", f"{pretty}.{name}", v, id(obj), name)
            self._class_guard(cls, name, raw, f"type({pretty}).{name}")
            return
        d = getattr(obj, "__dict__", None)
        if type(d) is dict and name in d:
            # argument objects are guarded eagerly (whole __dict__); others lazily, here
            if not argrooted and type(d[name]) is int and id(obj) in self.lazy_objs and \
                    self._counter_read(frame, obj, d, name, f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", (d,)):
                return
            if not argrooted:
                self.read(f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
            return
        if raw is not _MISSING:
            self._class_attr(obj, name, pretty, argrooted)

    def _tensor_attr(self, t: torch.Tensor, name: str, s: tuple | None) -> None:
        """An attribute read on a tensor: Python attributes set on it (`t.tag`) are guarded
        by value, methods and properties against monkeypatching of the tensor class."""
        cls = type(t)
        _, raw = _mro_lookup(cls, name)
        if (raw is _MISSING or not _is_data_descr(raw)) and s is not None and s[2] != "opaque":
            expr, pretty = s[0], s[1]
            if (id(t), name) in self.dirty:
                return
            d = t.__dict__
            keys = list(d)
            self.guard(Keys(f"{expr}.__dict__", f"vars({pretty})", tuple(keys)))
            if name in d:
                self.read(f"{expr}.__dict__[{name!r}]", f"{pretty}.{name}", d[name], id(t), name)
                return
        self._class_guard(cls, name, raw, f"{cls.__name__}.{name}")

    def _class_attr(self, obj: object, name: str, pretty: str, argrooted: bool = False) -> None:
        """Attribute found on the class (not the instance): guard the class attribute against
        monkeypatching, and (for non-data descriptors and plain class data) that no instance
        attribute shadows it."""
        cls = type(obj)
        _, raw = _mro_lookup(cls, name)
        if raw is _MISSING:
            return
        if not _is_data_descr(raw) and not argrooted:  # arguments: their keys are guarded
            d = getattr(obj, "__dict__", None)
            if type(d) is dict:
                self.guard(NoKey(self.const(d), pretty, name), group=(d,))
        self._class_guard(cls, name, raw, f"type({pretty}).{name}")

    def _class_guard(self, cls: type, name: str, raw: object, pretty: str) -> None:
        """Guard what `name` resolves to on `cls` (the raw MRO entry, or its absence)."""
        group = _class_dicts(cls)
        if not group:
            return  # immutable (C) types cannot be monkeypatched
        cc = self.const(cls)
        if raw is _MISSING:
            self.guard(NoClassAttr(cls, name, pretty), group=group)
            return
        try:
            vis = getattr(cls, name)
        except Exception:
            vis = _MISSING
        if vis is raw or (type(raw) is staticmethod and vis is raw.__func__):
            self.read(f"{cc}.{name}", pretty, vis, id(cls), name, group=group)
        else:  # classmethod or a custom descriptor: compare the raw MRO entry
            self.guard(ClassAttr(cls, name, raw, pretty), group=group)

    def op_load_deref(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        cell = _E.local_raw(frame, arg)
        e = self.ext_cells.get(id(cell))
        if e is None or (id(cell), "cell") in self.dirty:
            return
        try:
            v = cell.cell_contents
        except ValueError:
            return
        self.read(f"{e[0]}.cell_contents", e[1], v, id(cell), "cell")

    def op_kw_names(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        self.kwnames[frame] = frame.f_code.co_consts[arg] if not isinstance(argval, tuple) else argval

    def op_call(self, frame: types.FrameType, argc: int, argval: Any) -> None:
        kw = self.kwnames.pop(frame, ())
        meth = _E.peek(frame, argc + 1)
        if meth is not _NULL:
            f = meth
            slot = argc + 1
            args = [_E.peek(frame, argc - i) for i in range(argc + 1)]
        else:
            f = _E.peek(frame, argc)
            slot = argc
            args = [_E.peek(frame, argc - 1 - i) for i in range(argc)]
        nkw = len(kw)
        if nkw:
            kwargs = dict(zip(kw, args[len(args) - nkw:]))
            args = args[:len(args) - nkw]
        else:
            kwargs = {}
        self._on_call(frame, f, args, kwargs, slot)

    def op_call_ex(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        has_kw = arg & 1
        f = _E.peek(frame, 1 + has_kw)
        cargs = _E.peek(frame, has_kw)
        kwargs = _E.peek(frame, 0) if has_kw else {}
        if type(cargs) is not tuple:
            # f(*it): CPython turns the iterable into a tuple when the call runs; do it
            # now and hand it that tuple, so looking at the arguments does not exhaust an
            # iterator (x.permute(*reversed(range(n))))
            try:
                cargs = tuple(cargs)
            except Exception:
                return  # the call raises the same error itself
            _E.poke(frame, has_kw, cargs)
        if has_kw and type(kwargs) is not dict:
            try:
                kwargs = dict(kwargs)
            except Exception:
                return
            _E.poke(frame, 0, kwargs)
        self._on_call(frame, f, list(cargs), dict(kwargs), 1 + has_kw)

    def _on_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int | None = None) -> None:
        if slot is not None and f is _IS_COMPILING:
            # A recording is a compilation: code the tracer follows (the user's, and
            # libraries like transformers that keep data-dependent checks out of compiled
            # graphs) asking torch.compiler.is_compiling() is answered True, as under
            # torch.compile.  torch's own (untraced) code keeps torch's answer: there it
            # selects Dynamo-only machinery.
            _E.poke(frame, slot, _Canned(True))
            return
        if self.np_tensor_of_source(frame, f, args, kwargs, slot) or self._cached_call(frame, f, args, kwargs, slot):
            return
        if any(f is r for r in _FRAME_READERS):
            if f is globals or f is sys._getframe:
                raise Unreplayable(f"{f.__name__}() reads the calling frame, which a replay does not have")
            if not (args or kwargs):
                # locals() / vars() / dir(): a snapshot of this frame's variables, which the
                # tracer sees (replayed elsewhere it would read the replay's own frame)
                return
        kind = _call_kind(f)
        recv = self._opaque_method(f, args)
        if recv is not None:
            kind = "external"
        if kind == "external" and recv is None and (_pure_ufunc_call(f, args, kwargs) or
                                   f is id and frame.f_code.co_filename == copy.__file__):
            # id() in copy.deepcopy (dataclasses.asdict, ...): the keys of its memo of objects
            # already copied, which never leave it
            kind = "safe"
        so = getattr(f, "__self__", None)
        if so is None and args and type(f) is types.FunctionType:
            so = args[0]   # m.parameters() called as a method: f is the function, args[0] is m
        if isinstance(so, torch.nn.Module) and getattr(f, "__name__", "") in _MODULE_WALKERS \
                and id(so) in self.src:
            # parameters()/modules()/... run in torch code we do not trace: source the whole
            # subtree now so the yielded modules/parameters/buffers are known and guarded
            self._source_module_tree(so)
        elif isinstance(so, torch.nn.Module) and getattr(f, "__name__", "") == "state_dict" and \
                id(so) in self.src and not args[1 if getattr(f, "__self__", None) is None else 0:] and \
                set(kwargs) <= {"keep_vars"}:
            self._state_dict_tree(so)
        if self.lazy or self.lazy_objs:
            ff = getattr(f, "__func__", f)
            traced = type(ff) is types.FunctionType and _classify(ff.__code__) == "user"
            if not traced:
                if kind == "mutator" and getattr(f, "__name__", "") in _WRITE_ONLY:
                    self.touch_deep(list(args[1:] if getattr(f, "__self__", None) is None else args)
                                    + list(kwargs.values()))
                elif kind == "external":
                    for o in list(self.lazy.values()):
                        self.touch(o[0])
                else:
                    self.touch_deep(list(args) + list(kwargs.values()) +
                                    ([f.__self__] if hasattr(f, "__self__") else []))
        if kind == "safe":
            return
        if kind == "getattr":
            if len(args) >= 2 and type(args[1]) is str and id(args[0]) in self.src:
                self._fake_load_attr(args[0], args[1])
            return
        if kind == "vars":
            if len(args) == 1 and id(args[0]) in self.src and hasattr(args[0], "__dict__"):
                self._fake_load_attr(args[0], "__dict__")
            return
        if kind == "setattr":
            if args and id(args[0]) in self.src and len(args) >= 2:
                self.dirty.add((id(args[0]), args[1]))
                if type(args[1]) is str:
                    self.stored[id(args[0])].add(args[1])
            return
        if kind == "ctxvar":
            # ContextVar state is modelled like other external state: reads of values not set
            # by this call are guarded, the net change is replayed at the end
            cv = getattr(f, "__self__", None)
            if not isinstance(cv, contextvars.ContextVar):
                cv = args[0]
            if cv not in self.cv_snap:
                self.cv_snap[cv] = cv.get(_MISSING)
                self.keep.append(cv)
            name = f.__name__
            if name == "set":
                self.cv_local.add(cv)
            elif name == "reset":   # back to an earlier value (possibly the pre-call one)
                self.cv_local.discard(cv)
            elif cv not in self.cv_local:
                # a read that depends on the value the variable had before this call
                self.read(f"{self.const(cv)}.get({self.const(_MISSING)})", f"ContextVar {cv.name!r}",
                          self.cv_snap[cv])
            return
        if kind == "weakref":
            if id(f) in self.src:
                r = f()
                if r is not None:
                    self.read(f"{self.src[id(f)][0]}()", f"{self.src[id(f)][1]}()", r)
            return
        if kind == "mutator":
            so = getattr(f, "__self__", None)
            if so is None or isinstance(so, type):
                so = args[0] if args else None
            if id(so) in self.src:
                self.dirty.add((id(so), "*"))
            return
        if self._disabled_log_call(f, args, kwargs):
            self._flow_unused(frame)
            return
        # uncapturable call: replay it eagerly
        reason = f"call to uncapturable {_func_qualname(f)}"
        if recv is not None:
            f, args = recv
        self._external_call(frame, f, args, kwargs, reason, slot)

    def _disabled_log_call(self, f: Any, args: list, kwargs: dict) -> bool:
        """`log.debug(...)` (info, warning, ..., log(level, ...)) on a standard library logger
        that is not enabled for that level does nothing: no graph break, a guard that the
        logger is still disabled for the level instead (an enabled logger writes: a break)."""
        fn = getattr(f, "__func__", f)
        so = getattr(f, "__self__", None)
        rest = list(args)
        if so is None:
            if not rest:
                return False
            so = rest.pop(0)
        name = getattr(fn, "__name__", None)
        if not isinstance(so, (logging.Logger, logging.LoggerAdapter)) or name not in _LOG_LEVELS:
            return False
        base = logging.Logger if isinstance(so, logging.Logger) else logging.LoggerAdapter
        if base.__dict__.get(name) is not fn or type(so).isEnabledFor is not base.isEnabledFor:
            return False   # an overriding subclass may do anything
        level = _LOG_LEVELS[name]
        if level is None:   # log(level, msg, ...)
            level = rest[0] if rest else kwargs.get("level")
            if type(level) is not int:
                return False
        s = self.src.get(id(so))
        if s is None or s[2] == "opaque":
            return False
        try:
            if so.isEnabledFor(level):
                return False
        except Exception:
            return False
        self.guard(Equals(f"{s[0]}.isEnabledFor({level})", f"{s[1]}.isEnabledFor({level})", False))
        return True

    def _state_dict_tree(self, root: torch.nn.Module) -> None:
        """`m.state_dict()` runs in torch code we do not trace: when no module of the subtree
        customizes it (state_dict / _save_to_state_dict / get_extra_state overridden, state
        dict hooks), source the subtree (the parameters and buffers it returns are known and
        guarded) and guard what else it reads: no hooks, the non-persistent buffer names, the
        class methods."""
        base = torch.nn.Module
        mods = list(root.modules())
        for m in mods:
            cls = type(m)
            if any(getattr(cls, n, None) is not getattr(base, n) for n in _STATE_DICT_METHODS) or \
                    m._state_dict_hooks or m._state_dict_pre_hooks:
                return
        self._source_module_tree(root)
        for m in mods:
            s = self.src.get(id(m))
            if s is None:
                return
            self.guard(Lengths((m._state_dict_hooks, m._state_dict_pre_hooks), (0, 0), f"{s[1]} state_dict"))
            nps = m._non_persistent_buffers_set
            self.guard(Equals(self.const(nps), f"{s[1]}._non_persistent_buffers_set", set(nps)))
            for n in _STATE_DICT_METHODS:
                self._class_attr(m, n, s[1])

    def _source_module_tree(self, m: torch.nn.Module, seen: set[int] | None = None) -> None:
        seen = set() if seen is None else seen
        if id(m) in seen:
            return
        seen.add(id(m))
        s = self.src.get(id(m))
        if s is None:
            return
        for store in ("_parameters", "_buffers", "_modules"):
            d = m.__dict__[store]
            dc = self.const(d)
            self.guard(Keys(dc, f"{s[1]}.{store}", tuple(d.keys())))
            for k, v in d.items():
                self.read(f"{dc}[{k!r}]", f"{s[1]}.{k}", v, id(m), k)
                if isinstance(v, torch.nn.Module):
                    self._source_module_tree(v, seen)

    def _fake_load_attr(self, obj: object, name: str) -> None:
        self.op_load_attr(None, None, name, obj)

    def _external_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, reason: str,
                       slot: int | None = None, substitute: Callable[[Any], None] | None = None) -> None:
        i = self.ext_seen
        self.ext_seen += 1
        if i < len(self.catchup):
            # this call already ran in a replay whose mid-replay guard then failed: its
            # side effects happened, so the program gets that call's result instead (and
            # the RNG state it left, where it wrote the RNG: rng.py)
            value = _unlog(self.catchup[i])
            if substitute is not None:
                substitute(value)
            elif slot is None:
                raise Unreplayable("internal: cannot substitute an uncapturable call")
            else:
                _E.poke(frame, slot, _Canned(value))
        try:
            try:
                fe = self.expr_of(f)
            except Unreplayable:
                so = getattr(f, "__self__", None)
                if so is not None and not isinstance(so, types.ModuleType) and id(so) not in self.src \
                        and not isinstance(so, (logging_Logger, torch.Generator)):
                    raise
                fe = self.const(f)  # the same callable object is called again at replay
            ae = [self._flow_arg(frame, a) or self.expr_of(a) for a in args]
            ke = {k: self._flow_arg(frame, v) or self.expr_of(v) for k, v in kwargs.items()}
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{reason}: {e}"
            return
        self._close_seg()
        k = self.ncalls
        self.ncalls += 1
        self.steps.append(CallStep(k, fe, ae, ke, reason, external=True))
        self._add_break(reason, _frame_loc(frame))
        self.ext_depth += 1

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            res = _E.peek(fr, 0)
            if type(res) in (int, float) and self._follow_result(fr, k, res):
                return   # followed: guarded where the program uses it (flows.py)
            self._call_result(k, res, external=True)
            if fr in self.flow_frames:
                self._flow_tick(fr)   # flows of this frame: this step took their pending slot
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish

    def _call_result(self, k: int, res: Any, external: bool = False) -> None:
        name = f"b{k}"
        if isinstance(res, torch.Tensor):
            self._source(res, name, f"<result of break {k}>", argrooted=True)
        elif _is_opaque_value(res) or external and _is_context_manager(res):
            # e.g. a ContextVar token: passed on to other replayed calls, never inspected; a
            # library's context manager (its methods are replayed calls: special_calls.py)
            self.src[id(res)] = (name, f"<result of break {k}>", "opaque")
            self.keep.append(res)
            if not _is_opaque_value(res):
                self.guard(TypeIs(name, f"type(<result of break {k}>)", type(res)))
        else:
            try:
                self._source(res, name, f"<result of break {k}>", argrooted=True)
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or str(e)


_IS_COMPILING = torch.compiler.is_compiling
_FRAME_READERS = (locals, vars, dir, globals, sys._getframe)
_STATE_DICT_METHODS = ("state_dict", "_save_to_state_dict", "get_extra_state")


def _pure_ufunc_call(f: Any, args: list, kwargs: dict) -> bool:
    """A NumPy ufunc called without an output argument (`np.sqrt(d)`, `np.maximum(a, 0)`):
    a pure function of its arguments, which are guarded values (arrays are guarded by
    contents, tracked arrays were translated or materialized before), so its result is
    one too; ufunc methods (`np.add.at`, which writes) are not ufuncs."""
    np = sys.modules.get("numpy")
    if np is None or not isinstance(f, np.ufunc) or kwargs or len(args) > f.nin:
        return False
    # arrays and numbers only: a tensor argument is read by NumPy's C code (Tensor.__array__)
    return all(type(a) in (int, float, bool, complex) or isinstance(a, (np.generic, np.ndarray)) for a in args)

# logger methods that only write when the logger is enabled for their level (None: the
# level is the first argument)
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
               "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL,
               "fatal": logging.CRITICAL, "log": None}


_HANDLERS = {
    "BINARY_SUBSCR": _touch_ops(1),
    "BINARY_SLICE": _touch_ops(2),
    "GET_ITER": _touch_ops(0),
    "CONTAINS_OP": _touch_ops(0, 1),
    "UNPACK_SEQUENCE": _touch_ops(0),
    "UNPACK_EX": _touch_ops(0),
    "LIST_EXTEND": _touch_ops(0),
    "SET_UPDATE": _touch_ops(0),
    "DICT_UPDATE": _touch_ops(0),
    "DICT_MERGE": _touch_ops(0),
    "COMPARE_OP": _touch_ops(0, 1),
    "IS_OP": _touch_ops(0, 1),
    "FORMAT_VALUE": _touch_ops(0, 1),
    "GET_LEN": _touch_ops(0),
    "MATCH_SEQUENCE": _touch_ops(0),
    "MATCH_MAPPING": _touch_ops(0),
    "MATCH_KEYS": _touch_ops(1),
    "LOAD_GLOBAL": _TracerMixin.op_load_global,
    "LOAD_ATTR": _TracerMixin.op_load_attr,
    "LOAD_METHOD": _TracerMixin.op_load_attr,
    "LOAD_DEREF": _TracerMixin.op_load_deref,
    "LOAD_CLASSDEREF": _TracerMixin.op_load_deref,
    "STORE_DEREF": _SideEffectMixin.op_store_deref,
    "STORE_GLOBAL": _SideEffectMixin.op_store_global,
    "DELETE_GLOBAL": _SideEffectMixin.op_store_global,
    "STORE_ATTR": _SideEffectMixin.op_store_attr,
    "DELETE_ATTR": _SideEffectMixin.op_store_attr,
    "STORE_SUBSCR": _SideEffectMixin.op_store_subscr,
    "BINARY_OP": _SideEffectMixin.op_binary_op,
    "DELETE_SUBSCR": _SideEffectMixin.op_store_subscr,
    "STORE_SLICE": _SideEffectMixin.op_store_slice,
    "BEFORE_WITH": _TracerMixin.op_before_with,
    "KW_NAMES": _TracerMixin.op_kw_names,
    "CALL": _TracerMixin.op_call,
    "CALL_FUNCTION_EX": _TracerMixin.op_call_ex,
}
