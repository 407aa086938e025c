"""Callees capture gave up in, broken around: where a recording gives up inside a function or
module the captured frame calls (a router's data-dependent loop, a scan handed to torch code,
a module's `.to()` walking its parameters untraced), the frame is recorded again on its next
call with the call into that callee an uncapturable call (a graph break whose replay step
runs the callee eagerly, external_calls.py), the rest of the frame compiled around it.

Before, the frame ran eagerly with its callees captured on their own (replay._SkipFrameVariant):
each of them recorded on its next call and gave up one module level deeper again, so a model
whose forward gave up deep inside recorded again on call after call (a recording costs 100x+
an eager call: a Switch-Transformers MoE ran at 0.01x eager, Mamba at 0.02x).  The callee is
found by `failing_callee` when the recording gives up, kept per capture (`_Captured.break_codes`,
at most MAX_LEARNED), and matched at each call site of later recordings by `learned_break`."""
from __future__ import annotations

import os
import sys
import types
from typing import Any

import torch

from .classify import _TORCH_DIR, _classify

_FUNCTION_APPLY = torch.autograd.function.Function.apply.__func__.__code__

# callees learned per captured function: each costs one recording more; past them the frame
# gives up as before (runs eagerly, its callees captured on their own)
MAX_LEARNED = 4

_MODULE_CALL = frozenset({torch.nn.Module._wrapped_call_impl.__code__, torch.nn.Module._call_impl.__code__} |
                         {c for c in torch.nn.Module._call_impl.__code__.co_consts if type(c) is types.CodeType})
_CONTEXT_WRAPPER_FILES = (os.path.join(_TORCH_DIR, "utils", "_contextlib.py"),
                          os.path.join(_TORCH_DIR, "amp", "autocast_mode.py"))


def _machinery(code: types.CodeType) -> bool:
    """Untraced frames a call from traced code passes through on its way to the callee it
    names: nn.Module.__call__ (its `inner` too, the path with hooks) and torch's
    context-manager decorators (`@torch.no_grad()`)."""
    return code in _MODULE_CALL or code.co_filename in _CONTEXT_WRAPPER_FILES


def failing_callee(root: types.FrameType | None, code: types.CodeType) -> types.CodeType | None:
    """At the moment a recording gives up (called from inside the recorder): the code of the
    innermost traced frame below the captured frame `root` (whose code is `code`) that a traced
    frame called through call machinery alone, so that a call site of traced code names it
    (a function, a bound method, a module whose forward it is).  A traced frame called by
    untraced library code (a `combine_fn` that torch's associative_scan calls) is passed over
    for the traced frame that called into that library.  None: capture gave up in the captured
    frame's own code (or outside it)."""
    if root is None:
        return None
    chain = []   # frames from the innermost up to root (left out)
    f = sys._getframe(1)
    while f is not None and f is not root:
        chain.append(f)
        f = f.f_back
    if f is None:
        return None
    traced = [_classify(fr.f_code) == "user" for fr in chain]
    i = next((k for k, t in enumerate(traced) if t), len(chain))
    if chain and i == len(chain) and any(fr.f_code is _FUNCTION_APPLY for fr in chain):
        # no traced frame below root: it gave up inside a custom autograd.Function that
        # untraced library code the captured frame called itself applies (Dirichlet.rsample /
        # Beta.rsample's _Dirichlet: its forward's ops recorded under no_grad), named by the
        # outermost frame past the call machinery, where a call site of root's code names it
        k = len(chain) - 1
        while k >= 0 and _machinery(chain[k].f_code):
            k -= 1
        c = chain[k].f_code if k >= 0 else None
        return c if c is not None and c is not code and c.co_filename.startswith(_TORCH_DIR) else None
    while i < len(chain):
        j = i + 1
        direct = True
        while j < len(chain) and not traced[j]:
            direct = direct and _machinery(chain[j].f_code)
            j += 1
        c = chain[i].f_code
        if direct:
            return c if c is not code else None
        i = j
    return None


def _entry_codes(f: Any) -> list[types.CodeType]:
    """The code objects calling `f` enters, outermost first: a function's, a bound method's,
    a module's forward (an instance's own `forward` included), each followed down the
    `__wrapped__` chain of decorators (functools.wraps, torch's context decorators)."""
    if isinstance(f, torch.nn.Module):
        fn = f.__dict__.get("forward", type(f).forward)
    else:
        fn = f
    out = []
    for _ in range(8):
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None) if type(fn) is types.FunctionType else None
        if code is None:
            break
        out.append(code)
        fn = getattr(fn, "__wrapped__", None)
    return out


def learned_break(learned: dict, f: Any) -> str | None:
    """Where calling `f` enters a callee capture gave up in before (`learned`: code -> why):
    that reason; else None."""
    if not learned or isinstance(f, type):
        return None
    for code in _entry_codes(f):
        why = learned.get(code)
        if why is not None:
            return why
    return None


_COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>")
_SEQ_ITERS = {"range_iterator", "list_iterator", "tuple_iterator"}


def learned_callee_sources(rec: Any, f: Any, args: list) -> None:
    """Before callee f, which capture gave up in before, runs as an uncapturable call: a closure
    the call made (a nested helper, a comprehension: Python 3.11 makes one per call) is named by
    the replay as a new function of its code over the replay's values of its cells
    (functorch_calls.rebuilt_function), not the recording's function object, whose cells hold the
    recording's values; where it cannot be (a cell the callee writes, a value the replay cannot
    name) the function runs eagerly.  A comprehension's iterator (`.0`): comprehension_iterator."""
    if type(f) is not types.FunctionType or not f.__closure__ or id(f) in rec.src:
        comprehension_iterator(rec, f, args)
        return
    from .base import Unreplayable
    from .functorch_calls import rebuilt_function

    try:
        expr = rebuilt_function(rec, f)
    except Unreplayable as e:
        rec.unreplayable = rec.unreplayable or f"a closure made by the call, {f.__qualname__}, runs eagerly " \
                                                f"between graphs and cannot be made again at a replay ({e})"
        return
    rec.src[id(f)] = (expr, f"<{f.__qualname__} made by the call>", "opaque")
    rec.keep.append(f)
    comprehension_iterator(rec, f, args)


def comprehension_iterator(rec: Any, f: Any, args: list) -> None:
    """A comprehension (Python 3.11: a function of its own, called with the iterator of what it
    loops over, `.0`) that capture gave up in, run as an uncapturable call: its iterator, made by
    GET_ITER on the caller's stack right before the call and held by nothing else, is named by
    the replay as `iter(<what it iterates>)`, made again at that call (`[h[i, :int(n[i])] for i in
    range(h.shape[0])]`: a data-dependent break in each iteration, given up in, made the caller
    run eagerly: 'cannot reproduce value of type range_iterator').  Only an iterator not yet
    advanced, over a range of ints or over a list / tuple the replay names."""
    code = getattr(f, "__code__", None)
    if type(f) is not types.FunctionType or code is None or code.co_name not in _COMPREHENSIONS or \
            len(args) != 1 or code.co_varnames[:1] != (".0",):
        return
    it = args[0]
    if type(it).__name__ not in _SEQ_ITERS or type(it).__module__ != "builtins" or id(it) in rec.src:
        return
    try:
        red = it.__reduce__()
    except Exception:
        return
    if len(red) != 3 or red[2] != 0 or len(red[1]) != 1:
        return   # (advanced, or exhausted: `iter(())`)
    seq = red[1][0]
    if type(seq) is range:
        expr = f"iter({seq!r})"   # (its bounds: ints the recording read, guarded where they came from)
    else:
        try:
            expr = f"iter({rec.expr_of(seq)})"
        except Exception:
            return
    rec.src[id(it)] = (expr, f"<the iterator {f.__qualname__} loops over>", "opaque")
    rec.keep.append(it)


# codes learned per captured function where torch.compiler.is_compiling() gets eager's answer
MAX_EAGER_ANSWERS = 2


def compiling_answer(rec: Any, frame: types.FrameType) -> bool:
    """The answer a recording gives traced code asking torch.compiler.is_compiling() (the frame
    `frame` asks): True, as under torch.compile (transformers keeps data-dependent checks out of
    compiled graphs there), noting the frames running then (`rec.compiling_frames`); False, eager's
    answer, where a frame on the stack runs a code learned (`eager_compiling_codes`): a recording
    gave up on the path True selected there (`compiling_give_up`)."""
    learned = getattr(rec.captured, "eager_compiling_codes", None)
    f = frame
    while f is not None and f is not rec.root_frame:
        if learned and f.f_code in learned:
            return False
        rec.compiling_frames[id(f)] = f.f_code
        f = f.f_back
    return True


def compiling_give_up(rec: Any) -> types.CodeType | None:
    """At the moment a recording gives up (called from inside the recorder): the code of the
    innermost traced frame below the captured frame, where that frame was running when traced
    code was answered True by is_compiling() (compiling_answer): the path that answer selected
    there (an associative_scan handed to torch code, where eager runs a Python loop) is what
    capture gave up in, in its own code or in library code it called (a traced function that
    library calls, the scan's combine_fn, is passed over for the frame that called the library).
    A later recording answers False (eager's answer) in that code.  None: no such frame (it gave
    up in a traced callee of the frame that asked: a module's forward below a model's)."""
    if not rec.compiling_frames or rec.root_frame is None:
        return None
    chain, f = [], sys._getframe(1)
    while f is not None and f is not rec.root_frame:
        chain.append(f)
        f = f.f_back
    traced = [_classify(fr.f_code) == "user" for fr in chain]
    i = next((k for k, t in enumerate(traced) if t), len(chain))
    while i < len(chain):
        if rec.compiling_frames.get(id(chain[i])) is chain[i].f_code:
            return chain[i].f_code
        j, via_library = i + 1, False
        while j < len(chain) and not traced[j]:
            via_library = via_library or not _machinery(chain[j].f_code)
            j += 1
        if not via_library:
            return None   # (called by traced code directly, or through a module's __call__)
        i = j
    return None


class WriteSet(set):
    """The recorder's external writes (`dirty`: (id(obj), key)), remembering the frames that
    were running at the first one (innermost first), for `pass_through_codes`; `pending`: those
    not yet flushed before a graph break (flush_writes.py), which a replay makes at its end."""
    first: list[types.FrameType] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.pending: set = set()

    def add(self, key: Any) -> None:
        if not self.pending and self.first is None:
            f, chain = sys._getframe(1), []
            while f is not None:
                chain.append(f)
                f = f.f_back
            self.first = chain
        set.add(self, key)
        self.pending.add(key)


def pass_through_codes(writes: WriteSet, root: types.FrameType | None) -> set[tuple[types.CodeType, int | None]]:
    """At a call into a learned callee after the function wrote state (the frame then runs
    eagerly, as its callers up to the frame that made the write would: the callee must see
    the write, a replay makes it at its end): the frames from the captured frame `root` (left
    out) down to the innermost frame running both at the first write and now, each as its
    code and the id of its first argument's type (the class of a forward's module: the other
    instances of a stack, the decoder's beside the encoder's, write there too; another class
    whose forward has the same decorator does not pass through).
    Where a later call runs the root's frame eagerly with its callees captured on their own,
    those frames run as they are (frame_hook: no recording of theirs), so the callees below
    them are captured directly: before, each of those levels recorded the whole call again on
    a call of its own, one level deeper each time, and gave up there for the same write
    (transformers' output collector set around a stack of MoE blocks: 0.01x eager)."""
    if root is None or not writes.first:
        return set()
    at_write = {id(f) for f in writes.first}
    f, chain = sys._getframe(1), []
    while f is not None and f is not root:
        chain.append(f)
        f = f.f_back
    if f is None:
        return set()
    common = next((i for i, fr in enumerate(chain) if id(fr) in at_write), len(chain))
    return {(fr.f_code, _first_arg(fr)) for fr in chain[common:]}


def _first_arg(fr: types.FrameType) -> int | None:
    code = fr.f_code
    if not (code.co_argcount or code.co_flags & 0x04):
        return None
    v = fr.f_locals.get(code.co_varnames[0], _NONE)
    return None if v is _NONE else id(type(v))


_NONE = object()

