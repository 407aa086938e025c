"""`_Recorder`: the state of one recording run, combining the tracer, FX recording,
side-effect, source, value and guard mixins."""
from __future__ import annotations

import collections
import re
import sys
import types
from typing import TYPE_CHECKING

import torch

from .. import logs as _logs
from .steps import CallStep, Step
from .autocast import autocast_state
from .locations import _user_location
from .guards import Placed, _GlobalState, _GuardMixin
from .guard_kinds import TypeIs
from .flow_state import _followable
from .typeinfo import _pure_python_type
from .values import _ValueMixin
from .sources import _SourceMixin
from .side_effects import _SideEffectMixin
from .graph import _GraphMixin
from .overlaps import internal_overlap
from .np_interop import _NumpyMixin
from .tracer import _TracerMixin
from .resumes import ResumePoint, _ResumeMixin
from .give_ups import WriteSet, compiling_give_up, failing_callee

if TYPE_CHECKING:  # pragma: no cover
    from .cache import _Captured
    from .counters import _Counter
    from .graph_nodes import _Seg


# a break site (reason and file:line) met this many times in one call is a loop breaking on
# every iteration: the frame runs eagerly, its calls captured (replay.SkipFrameVariant)
LOOP_BREAKS = 8
_REPEATED = re.compile(r"(.*) \(x(\d+)\)")


def _plain_instance(v: object) -> bool:
    """An instance of a Python class with an instance dict (not a module, class, function or
    container): what sources._source guards by its whole dict when it is an argument."""
    t = type(v)
    return not isinstance(v, (type, torch.nn.Module, torch.Tensor, list, tuple, dict, set)) and \
        type(getattr(v, "__dict__", None)) is dict and _pure_python_type(t) and \
        not isinstance(v, (types.FunctionType, types.MethodType, types.ModuleType))


class _Recorder(_TracerMixin, _ResumeMixin, _NumpyMixin, _GraphMixin, _SideEffectMixin, _SourceMixin, _ValueMixin, _GuardMixin):
    """The state of one recording run (the first call of a variant, run for real under the
    tracer and the TorchFunctionMode); its behaviour lives in the mixins, one job each."""

    def __init__(self, captured: _Captured, func: types.FunctionType, code: types.CodeType, args: tuple,
                 argnames: list[str], catchup: list | None = None) -> None:
        self.captured = captured
        self.catchup = catchup or []   # results of uncapturable calls that already ran
        self.ext_seen = 0              # uncapturable calls met so far
        self.ext_writes = 0            # ... of them, those that may read or write the program's state
        self.func = func
        self.code = code
        self.args = args
        self.traced_codes: set[types.CodeType] = set()   # code objects of the frames traced
        self.consts: list = []                  # the constant table C of the generated code
        self.const_idx: dict[int, int] = {}     # id(obj) -> its index in consts
        self.src: dict[int, tuple] = {}         # id(obj) -> (expr, pretty, argrooted)
        self.keep: list = []                    # objects kept alive while ids are keys
        self.fresh_types: set[int] = set()      # classes a class factory made during the call
        self.fresh_modules: dict[int, torch.nn.Module] = {}   # modules the call made (module_factories.py)
        self.guards: list[Placed] = []   # the guards, in order, with their positions
        self.guard_exprs: set[tuple[str, int]] = set()   # (guard code, epoch)
        self.read_exprs: dict[str, int] = {}   # expression read -> the epoch it was read in
        self.epoch = 0   # uncapturable calls (which may write any state) recorded so far
        self.epoch_starts: list[int] = []   # the guard position each epoch after the first starts at
        # the uncapturable calls that wrote in place a tensor the recording had read before them
        # (torch.optim's step on the parameters): a replay must not record again after them
        self.tensor_writing_calls: list[tuple[int, str]] = []   # (call number, reason)
        self.own_calls = 0   # optimizer steps recorded that start no epoch (a guard after one needs a continuation)
        # ... of them, those run once per call (an optimizer's step, not its zero_grad): a replay
        # that misses after one must continue from there, never record again from the start
        self.own_writes = 0
        self.own_steps: set[int] = set()   # their call numbers
        self.own_state: dict[int, object] = {}   # an optimizer's state its step wrote (external_calls._own_state_call)
        self.hooked = set()
        self.memo = None
        self.lets = []
        self.lazy = {}
        self.lazy_objs = {}
        self.cv_snap = {}
        self.builtin_reads = {}
        self.arg_tensors = []
        self.has_inplace = False
        self.cv_local = set()
        self.hooked_global = False
        self.dirty = WriteSet()   # (id(obj), key)
        self.pass_codes: set = set()   # (give_ups.pass_through_codes)
        # keys the code stored into (attribute names, ("item", key) for subscripts): replayed
        # even when the stored value is the one the object already had when recording, since
        # the object may hold another value at replay
        self.stored: dict[int, set] = collections.defaultdict(set)
        self.snaps = {}        # id -> (kind, obj, expr, pretty, snapshot)
        self.global_snaps = {} # (id(g), name) -> (g, name, had, old)
        self.ext_cells = {}    # id(cell) -> (expr, pretty)
        self.segs: list[_Seg] = []
        self.cur: _Seg | None = None
        self.env: dict[int, tuple] = {}   # id(tensor) -> (tensor, seg_idx, node)
        self.np_env: dict[int, tuple] = {}   # id(numpy array computed from a tensor) -> (array, shadow tensor)
        # (graph, its output, truth, site or None) checked after that graph (asserts.py)
        self.spec_checks: list[tuple[int, str, bool, tuple | None]] = []
        self.np_results: dict[int, int] = {}   # id(tracked array returned by break k) -> k
        self.steps: list[Step] = []   # the replay plan: GraphStep | CallStep, in order
        # numbers read from tensors of the open graph, run after it (graph._defer_data_step):
        # break number -> (graph index, reason, location); the open graph's (index, guard position)
        self.deferred: dict[int, tuple[int, str, str]] = {}
        self.defer_window: tuple[int, int] | None = None
        self.deferred_segs: set[int] = set()
        self.defer_nodes: dict[tuple[int, str], object] = {}   # (graph, graph input's expression) -> its node
        self.defer_sites: set[tuple] = set()
        self.ncalls = 0
        self.suspended = 0
        self.ext_depth = 0
        self.ext_watch: list | None = None   # _DATA_DEP calls seen under ext_depth (special_calls._vmap_node)
        self.counters: dict[tuple[int, str], _Counter] = {}   # (id(obj), attribute) -> int counter
        # numbers from graph breaks followed by flows.py: break -> the number
        self.flows_open: dict[int, object] = {}    # still followed
        self.flows_given: dict[int, object] = {}   # handed to a call as (part of) an argument
        self.flows_scalar: dict[int, object] = {}  # a tensor operator's operand (flows._flow_tensor_operand)
        self.flow_call: tuple | None = None        # (frame, offset, id(arg) -> expression, breaks, callable)
        self.flow_calls: list[tuple] = []          # every flow_call made (close_flows)
        self.flow_calls_done: set[int] = set()     # ids of those needing no guard (flow_roots._flow_call_done)
        self.flow_scalar: tuple | None = None      # (id, float, expression, breaks): a tensor operand next
        self.flow_frames: dict = {}                # frame -> its flows (flow_state._Flow)
        self.flow_vals: dict[int, object] = {}     # every followed key -> its number
        self.flows_guarded: set[int] = set()       # keys guarded by value (escaped)
        # key < 0 (float argument, attribute) -> (expr, pretty, value, pos, group): its guard if it escapes
        self.flow_roots: dict[int, tuple] = {}
        self.flow_pos: dict[int, int] = {}         # attribute key -> the break count where it was read
        self.flow_ext: dict[int, int] = {}         # ... and the uncapturable calls met before (ext_writes)
        self.flow_bwd: dict[int, int] = {}         # ... and the backward calls met before (backward_steps)
        self.backward_steps = 0   # .backward() calls recorded (their hooks may run the program's code)
        self.flow_locals: dict[tuple, tuple] = {}  # (frame, variable index) -> (expression, keys, number)
        self.flow_stored: tuple | None = None      # (frame, variable index, offset) the follower stored last
        self.flow_attrs: dict[str, int] = {}       # attribute expression -> its key
        self.float_items: dict[int, tuple] = {}    # id(list) -> (list, item index -> key): flow_roots._flow_item
        self.flow_ret: dict[int, tuple] = {}       # id(float returned) -> (float, its expression)
        self.flow_ret_at: dict[object, tuple] = {}   # an int returned: its place in the result -> (int, expression)
        self.flow_ret_roots: dict[int, str] = {}   # attributes those expressions read -> their expressions
        # (id(obj), attribute) -> (float, expression, keys, obj): a followed float stored (flow_writes.py)
        self.flow_stores: dict[tuple[int, str | tuple], tuple] = {}   # (a list item: (id, ("item", i)))
        self.flow_item_at: tuple | None = None     # (frame, offset) of the last item store followed
        self.cur_depth = -1
        # resume points (resumes.py): the captured function's frame, the break whose call it
        # makes now and the call's offset, and the points taken, by break
        self.root_frame: types.FrameType | None = None
        self.resume_at: tuple[int, int] | None = None
        self.resume_frame: types.FrameType | None = None   # the frame that made that call
        self.resumes: dict[int, ResumePoint] = {}
        self.resume_missing: dict[int, str] = {}   # break -> why no resume point was taken there
        # uncapturable call k that may write -> (name, expression): objects the frame read
        # through a location before it, bound by the replay right before it (epochs._bind_held)
        self.epoch_binds: dict[int, list[tuple[str, str]]] = {}
        self.nbound = 0
        self.src_first: dict[int, str] = {}   # id(obj) -> its expression before it was bound
        self.pending = {}
        self.kwnames = {}
        self._unreplayable: str | None = None
        self.relearn = False   # gave up on a state writer now known: the next call records again
        self.unreplayable_loc: str | None = None   # the user's file:line where capture gave up
        self.give_up_callee: types.CodeType | None = None   # the callee it gave up in (give_ups.py)
        self.compiling_frames: dict[int, types.CodeType] = {}   # frames is_compiling() answered True (give_ups.py)
        self.compiling_code: types.CodeType | None = None   # one of them still running where it gave up
        self.return_loc: str | None = None   # the file:line the captured function returned from
        self.breaks: list[tuple[str, str]] = []   # (reason, location), one per place the graphs split
        self.leading_breaks = 0   # of those, the ones before any graph operation (splitting nothing)
        self.break_events: list[tuple[str, str]] = []   # every break operation (break_limit counts them)
        self.break_limit = getattr(captured, "break_limit", None)
        self.break_overflow: str | None = None     # set when the call broke the graph more than break_limit times
        # set when one break site was met LOOP_BREAKS times in one call: (reason, location, count)
        self.loop_break: tuple[str, str, int] | None = None
        self.break_sites: collections.Counter[tuple[str, str]] = collections.Counter()
        # what the frame calls, captured on their own when the frame runs eagerly (SkipFrameVariant)
        self.called_modules: dict[int, torch.nn.Module] = {}
        self.called_funcs: dict[int, types.FunctionType] = {}
        self.stopped = False           # recording stopped: the rest of the call runs untraced
        self.uses_rng = False
        self.versions: dict[int, tuple[torch.Tensor, int]] = {}  # id(t) -> (t, version at first sight)
        self.unversioned: set[int] = set()   # ids of external tensors written without a version bump
        # id(t.data) -> (t.data, t, its version when made), for t an external tensor
        self.data_aliases: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        self.vgroups: dict[tuple, tuple[tuple, tuple[int, ...]]] = {}  # group key -> (dicts, versions)
        self.tls0 = (torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set())
        self.state0 = _GlobalState()
        self.grad0 = self.state0.grad
        self.amb0 = self.state0.ambient
        self.autocast0 = autocast_state()   # (graph.py: autocast regions inside the call)
        self.const_names = {}
        # roots
        # float arguments (and int ones seen with two values: flow_roots._varies) followed
        # from their loads (flows.py) instead of guarded by value: name -> (index, value); a
        # flow key -(index + 1)
        self.float_args: dict[str, tuple[int, float]] = {}
        self.seen_here: set[tuple] = set()   # sources this recording noted first (flow_roots._varies)
        bound = getattr(captured, "bound", None)
        try:
            for i, (a, n) in enumerate(zip(args, argnames)):
                if i < code.co_argcount + code.co_kwonlyargcount and n not in code.co_cellvars and \
                        (_followable(a) or type(a) is int and self._varies(("arg", i), a)):
                    self.guard(TypeIs(f"L[{i}]", n, type(a)))
                    self.float_args[n] = (i, a)
                    self._flow_root(-(i + 1), f"L[{i}]", n, a)
                    continue
                if i == 0 and a is bound and _plain_instance(a):
                    # the instance of a compiled bound method or callable object (`mlircap.compile(
                    # kf.step)`): every call of this capture passes that same object, so it is read
                    # as an object reached through a global or a module attribute is (identity,
                    # its attributes guarded lazily where they are read), not as an argument
                    # object whose whole instance dict is guarded by value: a step counter or a
                    # write pointer it keeps (`self.n += 1`, `self.ptr = (self.ptr + 1) % cap`)
                    # recompiled every call, as a module's does not
                    self._source(a, f"L[{i}]", n, argrooted=False)
                    continue
                self._source(a, f"L[{i}]", n, argrooted=True)
        except Exception as e:  # e.g. an argument structure we cannot guard
            self.unreplayable = f"{type(e).__name__}: {e}"
        # storages of tensor arguments with internal overlap (expanded, or overlapping
        # as_strided rows): an in-place write to
        # a view of one runs the function eagerly (overlaps._overlapping_write)
        self.overlap_storages: set[int] = {
            a.untyped_storage().data_ptr() for a in args
            if isinstance(a, torch.Tensor) and a.layout == torch.strided and not a.is_nested and
            a.device.type != "meta" and internal_overlap(a)}
        if isinstance(func, types.FunctionType) and func.__closure__:
            for i, (c, n) in enumerate(zip(func.__closure__, code.co_freevars)):
                self.ext_cells[id(c)] = (f"F.__closure__[{i}]", n)
                self.keep.append(c)

    @property
    def unreplayable(self) -> str | None:
        """Why this recording cannot be replayed (the call then runs eagerly), or None."""
        return self._unreplayable

    @unreplayable.setter
    def unreplayable(self, why: str | None) -> None:
        if why and not self._unreplayable:
            self._unreplayable = why
            try:
                self.unreplayable_loc = self._give_up_location()
                self.give_up_callee = failing_callee(self.root_frame, self.code)
                self.compiling_code = compiling_give_up(self)
            except Exception:  # pragma: no cover
                self.unreplayable_loc = "<unknown>"

    def wrote_eagerly(self) -> bool:
        """Whether an uncapturable call recorded so far wrote state the call reads and the
        replay runs it once (a call that may write any state, an optimizer's step, a call that
        wrote tensors the recording had read): from there on a replay that misses continues
        the frame (guard_misses.py) and never records it again from its start, which would
        read what the call wrote; so no check is held past it (asserts.py; a number read past
        it, deferred.py, only until a guard on it needs a continuation)."""
        return bool(self.epoch or self.own_writes or self.tensor_writing_calls)

    def _give_up_location(self) -> str:
        """The user's file:line where capture gives up: the innermost user frame, and the
        line of the captured function's own frame that led there when that is another one
        (a helper, or library code classified as user code, gave up)."""
        loc = _user_location()
        f = sys._getframe(1)
        outer = None
        while f is not None:
            if f.f_code is self.code:
                outer = f"{f.f_code.co_filename}:{f.f_lineno}"
            f = f.f_back
        return loc if outer is None or outer == loc else f"{loc} (reached from {outer})"

    def _add_break(self, reason: str, loc: str, merge: bool = True) -> None:
        """Record a graph break (its CallStep was just appended).  Breaks with no graph
        between them split the graphs at one place, and count as one break (as Dynamo's
        break count does): `f"{t.mean():.3f}"` then `print` is one break with both reasons."""
        self.break_events.append((reason, loc))
        _logs.log("graph_breaks", f"{reason} at {loc}")
        merged = merge and bool(self.breaks) and len(self.steps) >= 2 and isinstance(self.steps[-2], CallStep)
        if merged:
            r0, l0 = self.breaks[-1]
            last = r0.rsplit("; then ", 1)[-1]
            rep = _REPEATED.fullmatch(last)
            if loc == l0 and (rep.group(1) if rep else last) == reason:   # the same again: counted
                r0 = r0[:len(r0) - len(last)] + f"{reason} (x{int(rep.group(2)) + 1 if rep else 2})"
                self.breaks[-1] = (r0, l0)
            else:
                self.breaks[-1] = (f"{r0}; then {reason}" + ("" if loc == l0 else f" (at {loc})"), l0)
        else:
            self.breaks.append((reason, loc))
            if not any(seg.nops for seg in self.segs):
                self.leading_breaks += 1
        # a break right after another (no graph operation between: `for p in params: p.grad =
        # None`) splits no graph: not a loop that would unroll into a graph per iteration, so
        # its site is not counted (a loop over 8+ parameters ran its whole frame eagerly);
        # break_limit still counts every break operation
        if not self.stopped and not merged:
            self.break_sites[(reason, loc)] += 1
            n = self.break_sites[(reason, loc)]
            if n >= LOOP_BREAKS:
                # a break met again and again at one place: a loop that breaks on every
                # iteration.  Unrolled, each iteration would be a graph of its own and the
                # iteration count a guard; instead (as Dynamo skips a frame with a break in a
                # loop) this frame runs eagerly and what it calls is captured on its own
                self.loop_break = (reason, loc, n)
                self.unreplayable = f"a graph break in a loop ({reason} at {loc}, {n} times in one call)"
                self.stopped = True
                return
        lim = self.break_limit
        if lim is not None and len(self.break_events) > lim and not self.stopped:
            # hundreds of graphs would each be compiled and replayed: stop recording, the rest
            # of the call and later calls with these arguments run eagerly
            top, n = collections.Counter(self.break_events).most_common(1)[0]
            self.break_overflow = f"most often: {top[0]} at {top[1]}, {n} times"
            self.unreplayable = f"more than {lim} graph breaks in one call ({self.break_overflow})"
            self.stopped = True
