"""In-place view operations on a tensor from outside the function (`x.transpose_(0, 1)`,
`x.unsqueeze_(0)` on an argument, as Dynamo captures them): the graph records the view
out of place (`x.transpose(0, 1)`, which the function's later uses of x read), and the
replay gives the caller's tensor its new shape and strides as the last of its writes
(`x.as_strided_(size, stride, offset)`: the metadata the recording left, a function of the
guarded metadata it started with).  No backend has to support metadata mutations of its
inputs (mlircap's runtime rewrote the input's data for them), and a replay that misses
leaves the tensor as it was.  The graph's example of that input is a view with the metadata
it had before the op (the recording changed the real tensor).  Until the replay's end the
tensor keeps its old metadata: a graph-break step after the op (which could see it) makes
the recording give up (`restride_ok`), as do other in-place metadata changes (resize_,
as_strided_, set_, an out= argument resized) and tensors that require grad.

An out= argument the function made itself and the op resizes (`torch.add(a, b,
out=torch.empty(0))`, the reuse idiom eager's resize warning names) is rebound instead: the
op is recorded out of place and the tensor is its result from then on (`_rebound_out`)."""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

from .steps import CallStep, Write

# view operations that change only the metadata of their operand -> their out-of-place form
_RESTRIDES = {"transpose_": "transpose", "t_": "t", "unsqueeze_": "unsqueeze", "squeeze_": "squeeze",
              "swapdims_": "swapdims", "swapaxes_": "swapaxes"}


def _meta_result(func, args: tuple, kw: dict):
    """`func(*args, **kw)`'s out-of-place result computed on meta tensors (its dtype, shape and
    strides), or None where the op raises there."""
    def meta(x):
        if type(x) is torch.Tensor and x.layout == torch.strided:
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return x
    try:
        return func(*tree_map(meta, args), **tree_map(meta, kw))
    except Exception:  # noqa: BLE001
        return None


class _RestrideMixin:
    """For `_Recorder` (through `_GraphMixin`)."""

    def _restride_inputs(self, name: str, kwargs: dict, before: list) -> list | None:
        """Before an in-place view op on tensors from outside the function: their graph
        inputs, made now (with the tensors' metadata before the op); None: not such an op."""
        if name not in _RESTRIDES or "out" in kwargs or self.np_env or \
                not all(type(t) is torch.Tensor and t.layout == torch.strided and not t.requires_grad
                        for t, _ in before):
            return None
        seg = self._seg()
        read = self.__dict__.setdefault("restride_read", set())
        for t, _ in before:
            s = self.src.get(id(t))
            if s is not None and any(ph.users for sg in self.segs for key, ph in sg.ph.items() if key == ("src", s[0])):
                read.add(id(t))   # (a graph op read it before: see restride_writes)
            self._arg_node(seg, t)
        return before

    def _restrides_graph_input(self, name: str, args: tuple, kwargs: dict) -> bool:
        """Whether an in-place view op (`v.transpose_(0, -1)`) restrided a tensor the function
        made that requires grad and that the open graph takes as an input (an earlier graph's
        output, across a graph break): aot_autograd's metadata mutation of such an input gave
        the graph's outputs the old metadata from the first replay on (wrong shapes) and its
        backward a gradient of the new shape ('invalid gradient ... got [1, 1, 6] but expected
        [6, 1, 1]': fuzz_graphs --families edges --grad seed 7128). Dynamo refuses the same
        ('an inplace view on a graph input'); the function runs eagerly. Within one graph the
        op stays a view of its own node."""
        if name not in _RESTRIDES or "out" in kwargs or not args:
            return False
        t = args[0]
        if type(t) is not torch.Tensor or not t.requires_grad or id(t) in self.src:
            return False
        e = self.env.get(id(t))
        return not (e is not None and e[0] is t and self.cur is not None and e[1] == self.cur.idx)

    def _restrided(self, pending: list) -> None:
        """After the op: the examples of those inputs get their metadata from before it, the
        tensors are noted for the replay's final restride."""
        rs = self.__dict__.setdefault("restrided", {})
        if not rs:
            self.restride_at = len(self.steps)
        for t, (_dtype, shape, stride, offset) in pending:
            s = self.src.get(id(t))
            rs[id(t)] = t
            for seg in self.segs:   # (this graph's, and those before it that take the tensor)
                if s is None or s[0] not in seg.inputs:
                    continue
                i = seg.inputs.index(s[0])
                if seg.examples[i] is t:
                    seg.examples[i] = torch.as_strided(t.detach(), shape, stride, offset)
                    self.keep.append(seg.examples[i])

    def _rebound_out(self, func, name: str, args: tuple, kwargs: dict, res, inner: list):
        """After `func(*args, out=t)` changed the shape or strides of t, a tensor the function
        made: the call recorded as `func(*args)`, whose result t is from then on, where that is
        what eager's out= did (returns `res`; None: the function then runs eagerly, as for
        as_strided_ / resize_ / set_ of its own tensors). Only where t alone changed, nothing
        else shares t's memory (a view of it, a tensor it views, an alias of an input: those
        would see the write, which the rebinding does not make), and the op's out-of-place
        result, computed on meta tensors, has t's new dtype, shape and strides (out= casts to
        t's dtype, and a reduction accumulates in it: sum of a half x, out= a float32 t)."""
        t = kwargs.get("out")
        if type(t) is not torch.Tensor or res is not t or t.layout != torch.strided or t._base is not None or \
                t.requires_grad or id(t) in self.__dict__.get("data_aliases", {}) or \
                any(u is not t and (u.dtype, u.shape, u.stride(), u.storage_offset()) != m for u, m in inner):
            return None
        use_count = getattr(torch._C, "_storage_Use_Count", None)
        # (2: t itself and the storage handle asked for here)
        if use_count is None or use_count(t.untyped_storage()._cdata) > 2:
            return None
        kw = {k: v for k, v in kwargs.items() if k != "out"}
        m = _meta_result(func, args, kw)
        if not (type(m) is torch.Tensor and m.device.type == "meta" and m.dtype == t.dtype and
                m.shape == t.shape and m.stride() == t.stride()):
            return None
        return self._after_torch(func, name, args, kw, res)

    def _out_layout_kept(self, func, args: tuple, kwargs: dict, res):
        """Before recording `func(*args, out=t)` that kept t's shape and dtype: where the op's
        out-of-place result has other strides than t, a tensor with that layout and t's new
        values (the call is then recorded as `r = func(*args)` and `t.copy_(r)`), else None.
        Functionalization made an out= op's result the out tensor's value, strides included:
        `torch.add(a.t(), b.t(), out=torch.empty(5, 40))` came back with strides (1, 5) where
        eager's are (40, 1) (a later `.view(-1)` failed the graph), and the kernel's loop order
        follows the out tensor's strides (TensorIterator sorts dims by the output's strides
        first: bf16 add with alpha, opmath.eager_loop), which the copy's destination keeps."""
        t = kwargs.get("out")
        if type(t) is not torch.Tensor or res is not t or t.layout != torch.strided or t.requires_grad \
                or t.numel() < 2:
            return None
        kw = {k: v for k, v in kwargs.items() if k != "out"}
        m = _meta_result(func, args, kw)
        if not (type(m) is torch.Tensor and m.device.type == "meta" and m.dtype == t.dtype and
                m.shape == t.shape) or m.stride() == t.stride():
            return None
        with torch.no_grad():
            tmp = torch.empty_strided(t.shape, m.stride(), dtype=t.dtype, device=t.device)
            tmp.copy_(t)
        self.keep.append(tmp)
        return tmp

    def restride_ok(self) -> str | None:
        """Why this recording cannot be replayed (see the module's docstring), or None."""
        if self.__dict__.get("restrided") and \
                any(isinstance(s, CallStep) for s in self.steps[self.restride_at:]):
            return ("an in-place view op changed the shape or strides of a tensor from outside the "
                    "function before a graph break (the step would see the tensor as it was)")
        return None

    def restride_writes(self) -> list[Write]:
        """The final writes: each restrided tensor given the metadata the recording left.
        Eager's in-place view op bumps the tensor's version before the ops after it read (and
        autograd saves) it; the graph saves the tensor before the replay's final as_strided_,
        whose bump then failed eager's saved-tensor check in backward ("modified by an inplace
        operation", edges --grad seed 97: `x1.unsqueeze_(-1)` then atan2(v2, x1)). Where no
        graph op read the tensor before the in-place view op, the final restride keeps its
        version ("restride_kept"): every read is after it, as the graph's saves are; where one
        did, eager's saves before the op fail its check, and the bump stays."""
        out = []
        read = self.__dict__.get("restride_read", set())
        for t in self.__dict__.get("restrided", {}).values():
            s = self.src.get(id(t))
            if s is None:
                raise RuntimeError("internal: a restrided tensor without a source")
            out.append(Write("restride" if id(t) in read else "restride_kept", s[0], None,
                             (tuple(t.shape), tuple(t.stride()), t.storage_offset())))
        return out
