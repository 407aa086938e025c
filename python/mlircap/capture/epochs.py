"""Epochs (`_EpochMixin`): an uncapturable call that may write any state starts a new one:
locations read again after it are guarded again (`_reread`), the containers the program
holds lazily guarded again from their contents then (`_new_epoch`), and the objects the
frame holds through locations bound by the replay right before the call (`_bind_held`)."""
from __future__ import annotations

import collections
import re
from typing import Any

import torch

from .guard_kinds import Is, SameAs
from .locations import _short
from .typeinfo import _is_ndarray
from .lazy_sources import _dict_items


# the name the replay binds an object read through a location to, before an uncapturable
# call that may write any state (after it, the location may hold another object)
_BOUND = re.compile(r"_r\d+")
# a location path (`C[1]['G']`, `L[0].cfg`, `b3[0]`, `_r0[1]`: attributes and subscripts with
# literal keys from a root): what is bound
_PATH = re.compile(r"(?:[CLF]\[\d+\]|F|b\d+|_r\d+)(?:\.\w+|\[[^\[\]()]*\])+")


class _EpochMixin:
    """Epochs for `_SourceMixin`: what is guarded again after an uncapturable call that may write."""

    def _reread(self, expr: str, pretty: str, v: Any) -> None:
        """expr, read before an uncapturable call (which may have written anything), read again
        after it, giving an object the recording tracks.  An object the replay takes as a
        constant (a module, a function, a parameter, ...) is guarded to be that object where
        the program reads it now (a tensor: with its metadata); one it reads through expr
        (a container, a buffer, an array) may be another object of the same kind: a tensor
        guarded by metadata, an array by contents, a container lazily by its contents now
        (_new_epoch already made it lazy: guarded where the program uses it)."""
        s = self.src[id(v)]
        if _BOUND.fullmatch(s[0]):
            # the object the frame read before the call (bound there, _new_epoch): the
            # location still holds it
            self.guard(SameAs(expr, pretty, s[0], s[1]))
        elif s[0] != expr:
            self.guard(Is(expr, pretty, v, _short(v)))
        if isinstance(v, torch.Tensor):
            self.guard(self._tensor_match(expr, pretty, v))
        elif _is_ndarray(v):
            self._source_ndarray(v, expr, pretty, False)
        elif s[0] == expr and id(v) not in self.lazy and type(v) not in (list, dict, set, collections.deque):
            self.guard(Is(expr, pretty, v, _short(v)))

    def _new_epoch(self, k: int) -> None:
        """Uncapturable call k (print to a user object, a callback, a logger's handler) has
        run: it may have written any state the program reads.  What is read again after it is
        guarded again after it (mid-replay, `read`), and so are the containers the program
        holds: lists, dicts, deques and sets are lazily guarded again, from their contents
        now, where the program next uses them (touch); so are objects still lazily guarded."""
        self._bind_held(k)
        self.epoch += 1
        self.epoch_starts.append(k + 1)
        if self.__dict__.get("flush_new") or self.__dict__.get("flush_conts"):   # (containers flushed before it)
            from .flush_writes import new_epoch_after   # (below in the layout: lazy)

            new_epoch_after(self, k)
        for vid in list(self.float_items):
            self.lazy.pop(vid, None)
            del self.float_items[vid]
        for vid, (kind, v, expr, pretty, _) in self.snaps.items():
            if kind in ("list", "dict", "deque", "set", "tuple") and (vid, "*") not in self.dirty:
                lz = self.lazy.get(vid)
                now = list(v) if kind in ("list", "deque", "tuple") else _dict_items(v) if kind == "dict" else set(v)
                self.lazy[vid] = (v, expr, pretty, lz[3] if lz else 0, k + 1, None, now)
        for vid, (o, _, *_) in list(self.lazy_objs.items()):
            self.lazy_objs[vid] = (o, k + 1, dict(o.__dict__))
        # an object's attributes the call wrote are its replay's writes, not the function's: the
        # snapshot of an object the function did not write is taken again (`self.calls += 1` in a
        # module run between graphs was also replayed at the end as the recording's count)
        written = {key[0] for key in self.dirty.pending if type(key) is tuple}   # (flushed: written already)
        for vid, (kind, v, expr, pretty, _) in list(self.snaps.items()):
            if kind in ("module", "obj", "slots", "obj+slots") and vid not in written:
                del self.snaps[vid]
                self._snap(v, expr, pretty)

    def _bind_held(self, k: int) -> None:
        """Before uncapturable call k, which may rebind any location: every object the
        recording tracks that the replay reaches through a location (a list read from a
        global, `gl = GL`; a tensor attribute of an argument) is bound by the replay right
        before the call (`_r0 = F.__globals__['GL']`, replay.py) and named by that binding
        from then on: graph inputs, guards, arguments, continuations and writes after the call
        then use the object the frame holds, not whatever the location holds after it (a
        location read again after the call is guarded to still hold it: _reread)."""
        binds = []
        for vid, s in list(self.src.items()):
            e = s[0]
            if not _PATH.fullmatch(e):
                continue
            name = f"_r{self.nbound}"
            self.nbound += 1
            binds.append((name, e))
            self.src[vid] = (name,) + tuple(s[1:])
            self.src_first.setdefault(vid, e)
            sn = self.snaps.get(vid)
            if sn is not None and sn[2] == e:
                self.snaps[vid] = sn[:2] + (name,) + sn[3:]
            lz = self.lazy.get(vid)
            if lz is not None and lz[1] == e:
                self.lazy[vid] = lz[:1] + (name,) + lz[2:]
        if binds:
            self.epoch_binds[k] = binds
