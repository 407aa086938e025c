"""Variants: a recording turned into guards plus generated replay code
(`_GraphVariant`), or an eager fallback (`_EagerVariant`).  What the generated code calls is
replay_helpers.py's; where a replay failing a guard after an uncapturable call goes,
guard_misses.py's."""
from __future__ import annotations

import collections
import contextlib
import re
import dataclasses
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from .. import thread_reads
from .autocast import autocast_state_as, set_autocast_state
from .base import Unreplayable, _Miss, _Raised
from .steps import CallStep, GraphStep, Write
from .guard_kinds import Guard, GuardEnv, _holds
from .data_writes import undo_data_writes
from .guards import Placed, _ambient, _compile_guard, _merge_guards
from .graph_compile import _FirstRunChecked, _compile_graph
from .higher_order import _double_backward_ok
from .index_inputs import index_copy_hazard
from .rng import _NewLogged, _RngLogged, _rng_states, _unlog_raising
from .device_checks import held_device_asserts, release
from .asserts import Deopt
from .flush_writes import apply_write, flush_bindings, new_logged, replay_unlog_new, undo_writes
from .replay_helpers import _WRITE_FORMS, _merge_log, _mk_obj, _rollback, _save_grads, mode_copies
from .guard_misses import _continuations

if TYPE_CHECKING:  # pragma: no cover
    from .cache import _Captured
    from .recorder import _Recorder


_BREAK_RESULT = re.compile(r"\bb\d+\b")
_NODE_VALUE = re.compile(r"\bn\d+_\w+")   # a graph's output in the replay


# ======================================================================================
# variants: guards + generated replay code

class _Variant:
    eager = False

    def __init__(self, rec: _Recorder, pre: list[Placed], reason: str | None = None) -> None:
        self.consts = rec.consts
        self.pre: list[Guard] = [p.guard for p in pre]   # the pre-call guards, as recorded
        self.graphs = []
        self.breaks = list(rec.breaks)
        # the breaks that split the graphs: one before any graph operation splits nothing
        # (Dynamo's explain() does not count those either)
        self.splits = len(self.breaks) - rec.leading_breaks
        self.reason = reason
        self.hits = 0
        self.state = rec.state0
        # the hot path: every pre-call guard's code (merged) compiled into one function
        self.guard = _compile_guard([p.expr for p in _merge_guards(rec, pre)], self.consts, self.state)
        self.grad0 = rec.grad0
        self.amb0 = rec.amb0
        self.captured: _Captured = rec.captured

    def first_failure(self, args: tuple, func: object) -> str | None:
        """The first guard the call with `args` fails, in words (None: all hold)."""
        if torch.is_grad_enabled() is not self.grad0:
            return f"torch.is_grad_enabled() == {self.grad0}"
        if _ambient() != self.amb0:
            return f"(inference_mode, autocast cpu, autocast cuda) == {self.amb0}"
        if not self.state.holds():
            return f"global torch state unchanged ({self.state.guard.reason().strip() or 'num_threads'} differs)"
        env = GuardEnv(args, func, self.consts)
        for g in self.pre:
            if not _holds(g, env):
                return g.describe()
        return None


class _EagerVariant(_Variant):
    eager = True

    def call(self, args: tuple, func: types.FunctionType, log: list | None = None) -> Any:
        """Run the call (frame arguments `args`) eagerly."""
        return self.captured._call_eager(func, args, log)


class _SkipFrameVariant(_EagerVariant):
    """The frame runs eagerly and what it calls is captured on its own (callees._Callees), as
    Dynamo skips a frame with a graph break in a loop: a break met again and again at one
    place (recorder.LOOP_BREAKS) or too many breaks in one call (break_limit).  Unrolled,
    the loop would be a graph per iteration, each compiled, and its iteration count a
    guard.  It counts as one break: the one that made the frame run eagerly."""

    def __init__(self, rec: _Recorder, pre: list[Placed], reason: str | None, brk: tuple[str, str] | None) -> None:
        super().__init__(rec, pre, reason=reason)
        if brk is not None:   # (None: capture gave up on the frame, no break made it eager)
            self.breaks = [brk]
            self.splits = 1
        c = rec.captured
        c.pass_codes |= rec.pass_codes
        mods = list(rec.called_modules.values())
        if rec.captured.is_module:   # its children, also those the loop reaches after the stop
            mods += [m for _, m in rec.captured.fn.named_children()]
        c.callees.add(mods, list(rec.called_funcs.values()))

    def call(self, args: tuple, func: types.FunctionType, log: list | None = None) -> Any:
        c = self.captured
        c.stats.eager_calls += 1
        if log:  # some uncapturable calls already ran: the tracer substitutes their results
            return c._record(func, args, log, store=False)
        return c.callees.run(func, c.code, args)


_HELD = re.compile(r"\b_r\d+\b")


def _unheld(rec: _Recorder, e: str) -> str:
    """`e` with the names of held objects (`_r3`, bound right before an uncapturable call:
    epochs._bind_held) replaced by the locations they are bound from, for code that runs
    before those bindings."""
    binds = {name: b for bs in rec.epoch_binds.values() for name, b in bs}
    for _ in range(8):
        e2 = _HELD.sub(lambda m: f"({binds[m.group()]})" if m.group() in binds else m.group(), e)
        if e2 == e:
            break
        e = e2
    return e


def _written(rec: _Recorder, w: Write) -> str:
    """The external location a replayed write stores into, in words (for messages)."""
    t = next((s[1] for s in rec.src.values() if s[0] == w.target), None) or \
        next((n for e, n in rec.ext_cells.values() if e == w.target), None) or "external state"
    if w.kind in ("item", "delitem"):
        return f"{t}[{w.key!r}]"
    return f"{t}.{w.key}" if w.kind == "set" and w.key is not None else t


class _GraphVariant(_Variant):
    def __init__(self, rec: _Recorder, result: Any, backend: Callable) -> None:
        rec.memo = {}
        try:
            ret = rec.return_expr(result)
        except Unreplayable as e:
            raise Unreplayable(f"{e} (in the value {rec.code.co_name} returns)") from None
        rec.close_flows()
        writes = rec.flow_writes(rec.counter_writes(rec.writes())) + rec.restride_writes()
        rec.keep.append(writes)
        wexprs = []
        for w in writes:
            try:
                wexprs.append(dataclasses.replace(w, value=rec.expr_of(w.value) if w.kind != "delitem" else None))
            except Unreplayable as e:
                raise Unreplayable(f"{e} (in the value the call leaves in {_written(rec, w)})") from None
        lets = list(rec.lets)
        rec.memo = None
        rec._close_seg()
        # mutated external tensors (for rollback on a mid-replay guard failure)
        written = rec.mutated_ids()
        # (not tensors the call's own replayed steps make, `b3` or reached from it: new
        # objects of each call, which a rollback at the start could not even name)
        mutated = [rec.src_first.get(vid, rec.src[vid][0]) for vid in rec.versions if vid in written and vid in rec.src
                   and not _BREAK_RESULT.search(rec.src_first.get(vid, rec.src[vid][0]))]
        rec.final_guards()
        rec.root_frame = None
        resumes = _continuations(rec)
        super().__init__(rec, [p for p in rec.guards if p.pos == 0])
        compiled = []
        try:
            from torch._subclasses.fake_tensor import FakeTensorMode
            fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        except Exception:  # pragma: no cover
            fake_mode = None
        copies = rec.__dict__.get("index_copies", ())
        with thread_reads.collecting() as reads:   # (compile-time reads of torch's thread count)
            for seg in rec.segs:
                hazard = index_copy_hazard(seg, [n for n, _ in copies])
                if hazard is not None:
                    # the next call records again, guarding that index by value (flows._flow_index);
                    # this one ran for real: correct
                    sites = rec.captured.__dict__.setdefault("index_sites_off", set())
                    sites.update(site for n, site in copies if n.graph is seg.graph)
                    rec.relearn = True
                    rec.unreplayable = f"a tensor indexed by a number that changes between calls, {hazard}"
                    raise Unreplayable(rec.unreplayable)
                if fake_mode is not None:
                    phs = [n for n in seg.graph.nodes if n.op == "placeholder"]
                    for ph, ex in zip(phs, seg.examples):
                        try:
                            ph.meta["example_value"] = fake_mode.from_tensor(ex)
                        except Exception:
                            pass
                seg.graph.output(tuple(seg.outputs))
                gm = fx.GraphModule(torch.nn.Module(), seg.graph)
                seg.gm = gm
                self.graphs.append(gm)
                dyn = rec.__dict__.get("dyn_shape") or {}   # tensors whose shape depends on tensor data
                # (in the mode the replay runs it in: after an unbalanced torch.set_grad_enabled(False)
                # the recording ended with grad off, and a graph traced so became an inference graph)
                with torch.inference_mode(seg.inference) if seg.inference != rec.amb0[0] else contextlib.nullcontext(), \
                        torch.set_grad_enabled(rec.grad0), autocast_state_as(rec.autocast0):
                    compiled.append(_compile_graph(backend, gm, list(seg.examples), rec.uses_rng,
                                                   double_backward=_double_backward_ok(rec, seg),
                                                   strict=getattr(rec.captured, "strict", False),
                                                   dyn_inputs=[i for i, t in enumerate(seg.examples)
                                                               if dyn.get(id(t)) is t]))
        if not getattr(backend, "follows_threads", False):   # (another backend's code may be for this count)
            reads.append(torch.get_num_threads())
        self.state.thread_reads += reads
        for i, c in enumerate(compiled):
            if isinstance(c, _FirstRunChecked):
                c.slot = (compiled, i)   # replaced by what it runs once its first run passed
        # (a check after a graph, asserts.py, misses as a mid-replay guard does)
        has_mid = any(p.pos > 0 for p in rec.guards) or bool(rec.spec_checks) or bool(rec.deferred_segs)
        # the leaves a backward in the call accumulates gradients into: the tensors requiring
        # grad the graphs take from outside (parameters, arguments)
        # (and those whose .grad the call sets: `p.grad = None`, graph_steps._grad_write)
        leaves = list(dict.fromkeys(
            [e for seg in rec.segs for e, t in zip(seg.inputs, seg.examples)
             if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad and not _BREAK_RESULT.search(e)
             and not _NODE_VALUE.search(e)] + list(rec.__dict__.get("grad_written") or ()))) \
            if rec.__dict__.get("grad_writes") else []
        data_written = list(rec.__dict__.get("data_written") or ())   # (`t.data = v`: data_writes.py)
        rollback = has_mid and (mutated or rec.uses_rng or leaves or data_written)
        # Uncapturable calls ("external" steps) run in order, exactly once per call of the
        # function: when a mid-replay guard fails after some of them ran, the miss carries
        # their results (_lg) to the next variant tried or to the re-recording, which use
        # them instead of calling again (no double print/write/append, no skipped random).
        L = ["def _make(C, B, _Miss, _mk, torch, _rollback, _merge_log, _unlog, _RngLogged, _rng_states, "
             "_save_grads, _Raised):",
             "    def __replay(L, F, _lg=None):"]
        ind = "        "
        # values as the replay starts (and those the writes flushed before a break read)
        for name, e in dict(rec.counter_bindings() + rec.flow_bindings() + flush_bindings(rec)).items():
            L.append(ind + f"{name} = {e}")
        if any(isinstance(st, CallStep) and st.external for st in rec.steps):
            L.append(ind + "_n = len(_lg) if _lg else 0")
        if rollback:
            if data_written:   # (their storage as the replay starts, put back first)
                L.append(ind + "_sd = [(_t, _t.data) for _t in (" +
                         "".join(_unheld(rec, e) + ", " for e in data_written) + ")]")
            L.append(ind + "_sv = [(_t, _t.detach().clone()) for _t in (" + "".join(m + ", " for m in mutated) + ")]")
            L.append(ind + ("_rng = _rng_states()" if rec.uses_rng else "_rng = None"))
            if leaves:   # (as the replay starts: held objects by their locations, bound later)
                L.append(ind + "_gs = _save_grads((" + "".join(_unheld(rec, e) + ", " for e in leaves) + "))")
            rb = "_rollback(_sv, _rng, _gs); " if leaves else "_rollback(_sv, _rng); "
            if data_written:
                rb = f"{rec.const(undo_data_writes)}(_sd); " + rb
        else:
            rb = ""
        if any(isinstance(st, CallStep) and st.pre_writes for st in rec.steps):
            # writes flushed before a break (flush_writes.py): put back by a replay that misses
            L.append(ind + "_u = []")
            rb = f"{rec.const(undo_writes)}(_u); " + rb
        midg: dict[int, list[str]] = collections.defaultdict(list)
        for p in rec.guards:
            if p.pos > 0:
                midg[p.pos].append(p.expr)
        ext_done: list[str] = []
        sites = [c[3] for c in rec.spec_checks if c[3] is not None]
        deopt_obj = Deopt(rec.captured, sites) if sites else None
        deopt = rec.const(deopt_obj) if sites else ""
        for st in rec.steps:
            if isinstance(st, GraphStep):
                seg = st.seg
                call = f"B[{seg.idx}](" + "".join(i + ", " for i in seg.inputs) + ")"
                gi = ind
                if seg.inference != rec.amb0[0]:   # a graph recorded in the other inference mode
                    L.append(ind + f"with torch.inference_mode({seg.inference}):")
                    gi = ind + "    "
                checks = [(out, truth, site) for si, out, truth, site in rec.spec_checks if si == seg.idx]
                miss = f"{rb}return _Miss(_merge_log(_lg, [{', '.join(ext_done)}]))"
                deferred = seg.idx in rec.deferred_segs
                if checks:
                    # the graph computes past a check (asserts.py) what eager computes only when
                    # it holds: an op there may raise where the check fails (an index that the
                    # check bounds), so an exception of the graph is a miss too (the call then
                    # records again and raises as eager does, or takes the other path)
                    # Its device-side asserts wait for the checks (device_checks.py: on the GPU
                    # a failed one ends the CUDA context; eager raises first, at the check).
                    L.append(gi + f"with {rec.const(held_device_asserts)}() as _dv:")
                    L.append(gi + "    try:")
                    gi += "        "
                elif deferred:   # the same past a number read after it (deferred.py; CPU only)
                    L.append(gi + "try:")
                    gi += "    "
                if seg.outputs:
                    L.append(gi + "".join(f"n{seg.idx}_{n.name}, " for n in seg.outputs) + "= " + call)
                else:
                    L.append(gi + call)
                inf = [f"n{seg.idx}_{n.name}" for n in seg.outputs if n in seg.inf_nodes and
                       seg.inference == rec.amb0[0]]
                if inf:   # values eager made in a block of the other inference mode (graph_steps._merge_inference)
                    L.append(gi + "".join(o + ", " for o in inf) + f"= {rec.const(mode_copies)}({not rec.amb0[0]}, " +
                             "".join(o + ", " for o in inf) + ")")
                for n in seg.outputs:   # instances of an argument's plain tensor subclass in eager
                    if n in seg.sub_nodes:
                        o = f"n{seg.idx}_{n.name}"
                        L.append(gi + f"{o} = {o}.as_subclass({rec.const(seg.sub_nodes[n])})")
                if checks or deferred:
                    L.append(gi[:-4] + "except Exception:")
                    L.append(gi + miss)
                for out, truth, site in checks:   # the truth a jump popped
                    L.append(ind + f"if bool({out}) is not {truth}:")
                    if site is not None:   # (a jump with no raise: not checked again, asserts.Deopt)
                        L.append(ind + f"    {deopt}()")
                    L.append(ind + f"    {miss}")
                if checks:
                    L.append(ind + f"{rec.const(release)}(_dv)")
            else:
                k = st.k
                callee, args, kwargs = st.callee, list(st.args), dict(st.kwargs)
                # the objects the frame holds, read through locations the call may rebind
                L.extend(ind + f"{name} = {e}" for name, e in rec.epoch_binds.get(k, ()))
                if st.pre_writes:   # (targets and values first, as at the end: a write may rebind a target)
                    # the call's callee and arguments are expressions of the state before the
                    # function's writes (as every expression of the replay: it writes at its end),
                    # so they are evaluated before the flushed writes are made (`self.step += 1;
                    # bisect(ms, self.step)` read the written step and added 1 again)
                    L.append(ind + f"_f{k} = {callee}")
                    L.extend(ind + f"_a{k}_{i} = {a}" for i, a in enumerate(args))
                    L.extend(ind + f"_k{k}_{i} = {v}" for i, v in enumerate(kwargs.values()))
                    callee, args = f"_f{k}", [f"_a{k}_{i}" for i in range(len(args))]
                    kwargs = {kk: f"_k{k}_{i}" for i, kk in enumerate(kwargs)}
                call = f"{callee}(" + ", ".join(args + [f"{kk}={vv}" for kk, vv in kwargs.items()]) + ")"
                if st.pre_writes:
                    for i, w in enumerate(st.pre_writes):   # (_pv{k}_{i}: guards after the call name it)
                        L.append(ind + f"_pt{i}, _pv{k}_{i} = {w.target}, {w.value}")
                    for i, w in enumerate(st.pre_writes):
                        L.append(ind + f"{rec.const(apply_write)}(_u, {w.kind!r}, _pt{i}, {rec._lit(w.key)}, _pv{k}_{i})")
                at = len(L)
                if st.external:
                    j = len(ext_done)
                    # a call that raises where its recording returned (an exhausted iterator's
                    # next(), a KeyError the function catches) misses: the recording that follows
                    # raises its exception there (base._Raised), once, as eager's call did
                    raised = "_Raised(_e)" if not (rollback and rec.uses_rng) else "_RngLogged(_Raised(_e), _rng_states())"
                    nl = new_logged(rec, k)   # (new containers flushed before it, logged with it: flush_writes.py)
                    wrap = (lambda e: f"{rec.const(_NewLogged)}({e}, ({''.join(n + ', ' for n in nl)}))") if nl else \
                        (lambda e: e)
                    raised = wrap(raised)
                    got = f"{rec.const(replay_unlog_new)}(_lg[{j}], ({''.join(n + ', ' for n in nl)}))" if nl else \
                        f"_unlog(_lg[{j}])"
                    L.append(ind + "try:")
                    L.append(ind + f"    b{k} = {got} if _n > {j} else {call}")
                    L.append(ind + "except Exception as _e:")
                    if st.grad is not None:
                        L.append(ind + f"    torch._C._set_grad_enabled({rec.grad0})")
                    L.append(ind + f"    {rb}return _Miss(_merge_log(_lg, [{''.join(d + ', ' for d in ext_done)}{raised}]))")
                    if rollback and rec.uses_rng:   # the RNG state it left, for a miss (rng.py)
                        L.append(ind + f"_x{j} = {wrap(f'_RngLogged(b{k}, _rng_states())')}")
                        ext_done.append(f"_x{j}")
                    elif nl:
                        L.append(ind + f"_x{j} = {wrap(f'b{k}')}")
                        ext_done.append(f"_x{j}")
                    else:
                        ext_done.append(f"b{k}")
                elif k in rec.deferred:
                    # a number read after its graph (deferred.py): int() of a NaN raises here, past
                    # what the graph computed after the read (eager raised at the read, and the
                    # function may catch it): a miss, recorded again
                    L.append(ind + "try:")
                    L.append(ind + f"    b{k} = {call}")
                    L.append(ind + "except Exception:")
                    L.append(ind + f"    {rb}return _Miss(_merge_log(_lg, [{', '.join(ext_done)}]))")
                else:  # a data-dependent tensor operation: no side effect, just run it
                    L.append(ind + f"b{k} = {call}")
                if st.grad is not None:   # run in the grad mode it was recorded in (graphs: grad0)
                    L.insert(at, ind + f"torch._C._set_grad_enabled({st.grad})")
                    L.append(ind + f"torch._C._set_grad_enabled({rec.grad0})")
                late = (rec.__dict__.get("flow_late_binds") or {}).get(k + 1, {})
                if midg.get(k + 1):
                    # (a guard raising, e.g. a key its container lost, fails: as the pre-call ones)
                    cond = " and ".join(f"({e})" for e in midg[k + 1])
                    L.append(ind + "try:")
                    L.append(ind + f"    _ok = {cond}")
                    L.append(ind + "except Exception:")
                    L.append(ind + "    _ok = False")
                    L.append(ind + "if not _ok:")
                    if k in resumes:   # after an uncapturable call that may write: the rest of the frame
                        chain = resumes[k]
                        for cont, rp in chain:
                            L.extend(ind + f"    {name} = {e}" for name, e in rp.lets)
                        for j, (cont, rp) in enumerate(chain):
                            # (a helper's continuation returns into its caller's: `_v` on its stack)
                            vals = [e or "None" for e in rp.local_exprs + rp.stack_exprs]
                            last = j == len(chain) - 1
                            L.append(ind + f"    {'return' if last else '_v ='} {cont}({rp.func}, {', '.join(vals)})")
                    else:
                        L.append(ind + f"    {rb}return _Miss(_merge_log(_lg, [{', '.join(ext_done)}]))")
                # numbers returned as read after this break (flows._flow_returned)
                L.extend(ind + f"{name} = {e}" for name, e in sorted(late.items()))
        for name, e in lets:
            L.append(ind + f"{name} = {e}")
        for i, w in enumerate(wexprs):
            if w.value is not None:
                L.append(ind + f"_w{i} = {w.value}")
        # a target found before any write: it is an object the recording reached (by its path
        # from the call's start), which another write of this list may rebind (`_cache[k] = t`
        # then `_cache = {}` in parametrize.cached(): eager's item went into the dict bound
        # before; written after the rebinding it went into the new one, left holding the tensor)
        targets = {}
        for i, w in enumerate(wexprs):
            if any(v.kind in ("item", "set", "delitem") and w.target != v.target and w.target.startswith(v.target)
                   for v in wexprs):
                targets[i] = f"_t{i}"
                L.append(ind + f"_t{i} = {w.target}")
        for i, w in enumerate(wexprs):
            kind, target, key, fn = w.kind, targets.get(i, w.target), w.key, w.setter
            kl = rec._lit(key) if key is not None else None
            if kind == "item":
                L.append(ind + (f"{fn}({target}, {kl}, _w{i})" if fn else f"{target}[{kl}] = _w{i}"))
            elif kind == "delitem":
                L.append(ind + (f"{fn}({target}, {kl}, None)" if fn else f"{target}.pop({kl}, None)"))
            elif kind in _WRITE_FORMS:
                L.append(ind + _WRITE_FORMS[kind].format(t=target, k=key, w=f"_w{i}"))
        grad_end = rec.__dict__.get("grad_end", rec.grad0)
        if grad_end != rec.grad0:   # torch.set_grad_enabled(flag) not restored: eager leaves it so
            L.append(ind + f"torch._C._set_grad_enabled({grad_end})")
        ac_end = rec.__dict__.get("autocast_end", rec.autocast0)
        if ac_end != rec.autocast0:   # torch.set_autocast_enabled(...) not restored, as grad mode
            L.append(ind + f"{rec.const(set_autocast_state)}({rec.const(ac_end)})")
        L.append(ind + f"return {ret}")
        if grad_end == rec.grad0 and ac_end == rec.autocast0:
            # an exception out of a graph that switched grad mode / autocast (the program's own
            # error inside `with torch.no_grad():`, an index out of range rerun eagerly) left the
            # graph's mode set: eager's `with` blocks restore it as the exception leaves them
            # (a program catching the error then ran without gradients). Balanced recordings
            # only: an unbalanced torch.set_grad_enabled(False) is eager's state to keep.
            body = "\n".join(L[2:]).split("\n")
            L[2:] = [ind + "try:"] + ["    " + line for line in body] + [
                ind + "except BaseException:",
                ind + f"    torch._C._set_grad_enabled({rec.grad0})",
                ind + f"    {rec.const(set_autocast_state)}({rec.const(rec.autocast0)})",
                ind + "    raise"]
        L.append("    return __replay")
        self.source = "\n".join(L)
        ns = {}
        exec(compile(self.source, "<mlircap replay>", "exec"), ns)
        self.replay = ns["_make"](self.consts, compiled, _Miss, _mk_obj, torch, _rollback, _merge_log,
                                  _unlog_raising, _RngLogged, _rng_states, _save_grads, _Raised)
        self.mid_guards: list[Placed] = [p for p in rec.guards if p.pos > 0]
        if deopt_obj is not None:
            deopt_obj.variant = self
        # call(args, func, log): the generated replay itself (no method in between)
        self.call = self.replay
