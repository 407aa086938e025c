"""Index ops whose indices come from the inputs, compiled with a bounds check.

Eager raises when an index is out of range; compiled code would read or write out of
bounds. These ops ran as eager islands (partition.py). With a check they compile:

* every index tensor `t` of such an op, along a dimension of size `n`, is replaced in
  the graph by `where(bad, 0, t)` with `bad = (t < 0) | (t >= n)`, after a negative
  index of the ops that wrap it (`x[idx]`, `take`: _WRAPS_NEGATIVE) got `n` added as
  eager's kernels add it: the compiled kernels only ever see indices inside the tensor,
  whatever the inputs hold;
* `any(bad)` over all of them is one more output of the graph (an error flag, as
  inductor's device asserts are checked after the launch);
* after the compiled call, a set flag discards the results (IndexOutOfRange, before
  aot_autograd writes anything back) and the backend reruns the captured graph, with
  eager's kernels: eager's error (IndexError from cross_entropy, RuntimeError from
  gather). Compiled parts only write buffers they allocated, so the rerun
  starts from the program state eager would see; the random number generator is
  rewound to where the compiled call found it.

On the GPU reading the flag would synchronize the host with the device, and a rerun
would need it. There eager's index kernels do not raise either: an index out of range
is a device-side assert (CUDA_KERNEL_ASSERT), which poisons the CUDA context, and
`x[idx]` and `take` wrap negative indices first. So on the GPU (device="cuda") only the
read ops (_CHECKED) are rewritten, as eager's CUDA kernels index: negative indices of
the ops that wrap them (_WRAPS_NEGATIVE) get the dimension's size added, every index
is clamped into range as on the CPU, and the graph's last output is the flag "all
indices in range", which BoundsChecked hands to torch._assert_async after the launch:
torch's own device-side assert, no host synchronization, the same error as eager's.
The compiled kernels never read out of bounds. So are the writes at indices whose result
is the same in any order (scatter.cuda_order_free: reductions of integers; eager's CUDA
kernels apply writes in no set order and assert on an index out of range). The other
rewrites (other writes at indices, bounded loops, divisions) need the rerun and stay CPU
only; their ops stay islands on the GPU.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from . import logs
from .capture.device_checks import hold
from .fxutil import bool_like, op_name, tensor_like

aten = torch.ops.aten


def _size(node, dim: int) -> int | None:
    v = node.meta.get("val") if isinstance(node, fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return None
    if v.dim() == 0:
        return 1 if dim in (0, -1) else None
    return int(v.shape[dim])


def _numel(node) -> int | None:
    v = node.meta.get("val") if isinstance(node, fx.Node) else None
    return int(v.numel()) if isinstance(v, torch.Tensor) else None


def _dim_arg(node, i: int = 1) -> int:
    return node.args[i] if len(node.args) > i else node.kwargs.get("dim", 0)


def _along_dim(node):
    """op(self, dim, index, ...): the index (argument 2) along self's `dim`."""
    return [(("args", 2), _size(node.args[0], _dim_arg(node)))]


def _embedding(node):
    return [(("args", 1), _size(node.args[0], 0))]


def _take(node):
    return [(("args", 1), _numel(node.args[0]))]


def _index_list(node):
    """op(self, indices: list[Tensor?], ...): indices[j] along self's dim j."""
    out = []
    for j, t in enumerate(node.args[1]):
        if t is None:
            continue
        v = t.meta.get("val") if isinstance(t, fx.Node) else None
        if not isinstance(v, torch.Tensor) or v.dtype in (torch.bool, torch.uint8):
            return None    # a mask: data-dependent shapes, never compiled
        out.append((("list", 1, j), _size(node.args[0], j)))
    return out


# op name -> the index arguments it reads: [(where, size of the dimension it indexes)]
_CHECKED = {
    "aten::gather": _along_dim, "aten::index_select": _along_dim,
    "aten::embedding": _embedding, "aten::take": _take,
    "aten::index": _index_list,
}
# Of them, the ops whose eager kernels (CPU and CUDA) wrap a negative index i to i + n
# before checking it (advanced indexing `x[idx]`, take); gather, index_select and
# embedding reject negative indices.
_WRAPS_NEGATIVE = ("aten::index", "aten::take")
# Not the ops that write at indices (scatter*, index_put, index_add/copy/fill/reduce):
# their lowerings are torch-mlir's tm_tensor.scatter, which the CPU plan has no kernel
# for, or crash torch-mlir (SIGSEGV/SIGABRT in the compile worker, OpInfo scatter_reduce).
# Small ones are rewritten without a scatter and checked here (scatter.py).


# Integer divisions: eager raises ZeroDivisionError on a zero divisor; compiled code
# trapped (SIGFPE: remainder, fmod, the whole process died) or returned garbage (floor
# division). The divisor is checked like an index: zeros replaced by 1, any(zero) the flag.
# So is the one other division the hardware traps on, the dtype's minimum by -1 (int32
# INT_MIN // -1, % -1, fmod: SIGFPE in the compiled code, where eager gives INT_MIN, 0, 0):
# such a divisor is replaced by 1 too and the call reruns eagerly.
_DIVISIONS = {"aten::div", "aten::floor_divide", "aten::remainder", "aten::fmod"}


def _check_divisor(graph: fx.Graph, node: fx.Node):
    """`node` (an integer division by a tensor) reads a divisor without zeros; returns
    its error flag, or None where nothing is checked (floating or scalar divisors, true
    division)."""
    if len(node.args) < 2 or not isinstance(node.args[1], fx.Node):
        return None
    b, res = node.args[1].meta.get("val"), node.meta.get("val")
    if not isinstance(b, torch.Tensor) or not isinstance(res, torch.Tensor) or b.numel() == 0:
        return None
    if res.is_floating_point() or res.is_complex() or res.dtype == torch.bool or b.is_floating_point() \
            or b.is_complex():
        return None     # eager's floating division has no error (a bool divisor of an integer
        # result is checked: False divides as 0, bench/fuzz_graphs.py seed 473 --families dtypes)
    a = node.args[0]
    low = torch.iinfo(res.dtype).min
    av = a.meta.get("val") if isinstance(a, fx.Node) else a
    # the dividend can be the dtype's minimum: a tensor of the result's integer dtype (or a
    # wider one), or that Python int
    overflow = low < 0 and (isinstance(av, torch.Tensor) and not av.is_floating_point() and not av.is_complex()
                            and av.dtype != torch.bool and torch.iinfo(av.dtype).min <= low
                            or isinstance(av, int) and not isinstance(av, bool) and av == low)
    # the kernel divides by the divisor converted to the result's dtype: an int64 256 divides
    # a uint8 tensor as 0 (eager: ZeroDivisionError; compiled: SIGFPE, bench/fuzz_graphs.py
    # seed 271 --families dtypes), so that is what is compared, and what it divides by
    # (torch-mlir's lowering divided a uint8 by an int64 -3 as -3, eager by 253)
    divisor = node.args[1]
    with graph.inserting_before(node):
        if b.dtype != res.dtype:
            divisor = graph.call_function(aten._to_copy.default, (node.args[1],), {"dtype": res.dtype})
            divisor.meta["val"] = tensor_like(b, b.shape, res.dtype)
        zero = graph.call_function(aten.eq.Scalar, (divisor, 0))
        bad = zero
        if overflow:
            minus = graph.call_function(aten.eq.Scalar, (divisor, -1))
            lowest = graph.call_function(aten.eq.Scalar, (a, low)) if isinstance(a, fx.Node) else None
            trap = graph.call_function(aten.logical_and.default, (minus, lowest)) if lowest is not None else minus
            bad = graph.call_function(aten.logical_or.default, (zero, trap))
        safe = graph.call_function(aten.where.ScalarSelf, (bad, 1, divisor))
        flag = graph.call_function(aten.any.default, (bad,))
    zero.meta["val"], flag.meta["val"] = bool_like(b, b.shape), bool_like(b, ())
    if overflow:
        minus.meta["val"] = bool_like(b, b.shape)
        if lowest is not None:
            lowest.meta["val"] = bool_like(av, av.shape)
            trap.meta["val"] = bool_like(b, torch.broadcast_shapes(b.shape, av.shape))
        bad.meta["val"] = bool_like(b, torch.broadcast_shapes(b.shape, trap.meta["val"].shape))
    shape = bad.meta["val"].shape if overflow else b.shape
    bv = divisor.meta["val"] if divisor is not node.args[1] else b
    safe.meta["val"] = bv if tuple(shape) == tuple(b.shape) else tensor_like(bv, shape)
    node.args = (a, safe, *node.args[2:])
    node.meta["mlircap_bounds_checked"] = True
    return flag


def _assert_flag(graph: fx.Graph, node: fx.Node):
    """`_assert_async(cond[, msg])` replaced by its error flag `cond == 0` (a single
    element, as eager requires); the node itself is erased."""
    cond = node.args[0]
    with graph.inserting_before(node):
        zero = graph.call_function(aten.eq.Scalar, (cond, 0))
        flag = graph.call_function(aten.any.default, (zero,))
    v = cond.meta.get("val")
    zero.meta["val"], flag.meta["val"] = bool_like(v, v.shape), bool_like(v, ())
    flag.meta["mlircap_bounds_checked"] = True
    graph.erase_node(node)
    return flag


def checkable(node: fx.Node) -> bool:
    return node.meta.get("mlircap_bounds_checked", False)


def add_bounds_checks(gm: fx.GraphModule, device: str = "cpu") -> bool:
    """Rewrites `gm` as the module docstring says (index arguments clamped, the error
    flag appended to the outputs; on device "cuda": the read ops only, negative indices
    wrapped where eager wraps them, and the flag appended is "all in range"): True
    where it appended the flag. Index ops whose index tensors have no elements are
    only marked (nothing to read or check)."""
    from . import histogram, igamma, polynomials, scatter, segments, selection, signs, zeta

    graph = gm.graph
    flags = []
    gpu = device == "cuda"
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if gpu and op_name(node.target) not in _CHECKED and not (
                op_name(node.target) in scatter.WRITES and scatter.cuda_order_free(node)):
            continue   # the rewrites below need a rerun (module docstring)
        if op_name(node.target) in scatter.WRITES:   # written at indices: unrolled (scatter.py)
            written = scatter.rewrite(graph, node)
            flags += written or []
            continue
        if op_name(node.target) in polynomials.OPS:   # loops bounded by a degree tensor
            flags += polynomials.rewrite(graph, node) or []
            continue
        if op_name(node.target) in selection.OPS:   # median, kthvalue, mode: ranked (selection.py)
            ties = selection.rewrite(graph, node) or []
            flags += ties
            gm.meta["mlircap_bounds_ties"] = gm.meta.get("mlircap_bounds_ties", False) or bool(ties)
            continue
        if op_name(node.target) == "aten::segment_reduce":   # segments from lengths/offsets tensors
            flags += segments.rewrite(graph, node) or []
            continue
        if op_name(node.target) == "aten::linspace":   # integer, tensor endpoints (ranges.py)
            from .ranges import integer_linspace_rewrite

            flag = integer_linspace_rewrite(graph, node)
            if flag is not None:
                flags.append(flag)
            continue
        if op_name(node.target) == "aten::special_zeta":   # a sum whose length depends on q
            flags += zeta.rewrite(graph, node) or []
            continue
        if op_name(node.target) == "aten::histc":   # bounds from the data (histogram.py)
            flags += histogram.rewrite(graph, node) or []
            continue
        if op_name(node.target) in igamma.OPS:   # igamma/igammac: a bounded series (igamma.py)
            flags += igamma.rewrite(graph, node) or []
            continue
        if op_name(node.target) in signs.OPS:   # copysign: a NaN sign reruns eagerly (signs.py)
            flags += signs.rewrite(graph, node) or []
            continue
        if op_name(node.target) == "aten::polygamma":   # n >= 2: a zeta
            flags += zeta.polygamma_rewrite(graph, node) or []
            continue
        if op_name(node.target) == "aten::_assert_async":
            # torch.compile's `assert (x < 3).all(), msg`: a failed assert reruns the graph,
            # whose _assert_async raises as eager's (compiled, it was dropped: no error)
            flags.append(_assert_flag(graph, node))
            continue
        if op_name(node.target) in _DIVISIONS:
            flag = _check_divisor(graph, node)
            if flag is not None:
                flags.append(flag)
            continue
        spec = _CHECKED.get(op_name(node.target))
        where = spec(node) if spec is not None else None
        if not where or any(n is None or n <= 0 for _, n in where):
            continue
        args = list(node.args)
        tensors = [args[p[1]] if p[0] == "args" else args[p[1]][p[2]] for p, _ in where]
        vals = [t.meta.get("val") if isinstance(t, fx.Node) else None for t in tensors]
        if not all(isinstance(v, torch.Tensor) and not v.is_floating_point() and not v.is_complex()
                   and v.dtype != torch.bool for v in vals):
            continue
        for (path, n), t, v in zip(where, tensors, vals):
            if v.numel() == 0:
                continue     # no index to read
            mask = bool_like(v, v.shape)
            with graph.inserting_before(node):
                if op_name(node.target) in _WRAPS_NEGATIVE:   # as eager's CPU and CUDA kernels
                    neg = graph.call_function(aten.lt.Scalar, (t, 0))
                    up = graph.call_function(aten.add.Tensor, (t, n))
                    t = graph.call_function(aten.where.self, (neg, up, t))
                    neg.meta["val"], up.meta["val"], t.meta["val"] = mask, v, v
                low = graph.call_function(aten.lt.Scalar, (t, 0))
                high = graph.call_function(aten.ge.Scalar, (t, n))
                bad = graph.call_function(aten.logical_or.default, (low, high))
                safe = graph.call_function(aten.where.ScalarSelf, (bad, 0, t))
                flag = graph.call_function(aten.any.default, (bad,))
            for x, val in ((low, mask), (high, mask), (bad, mask), (safe, v), (flag, bool_like(v, ()))):
                x.meta["val"] = val
            flags.append(flag)
            if path[0] == "args":
                args[path[1]] = safe
            else:
                lst = list(args[path[1]])
                lst[path[2]] = safe
                args[path[1]] = lst
        node.args = tuple(args)
        node.meta["mlircap_bounds_checked"] = True
    if not flags:
        return False    # nothing, or only empty index tensors (the marked ops compile as they are)
    out = graph.output_node()
    flag = flags[0]
    with graph.inserting_before(out):
        for f in flags[1:]:
            flag = graph.call_function(aten.logical_or.default, (flag, f))
            flag.meta["val"] = flags[0].meta["val"]
        if gpu:   # "all in range", for torch._assert_async
            flag = graph.call_function(aten.logical_not.default, (flag,))
            flag.meta["val"] = flags[0].meta["val"]
    res = out.args[0]
    single = isinstance(res, fx.Node)
    out.args = ((*([res] if single else res), flag),)
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
    gm.meta["mlircap_bounds_single"] = single
    return True


class IndexOutOfRange(Exception):
    """A bounds check failed: the backend reruns the captured graph (rerun_on_bad_index)."""


MAX_RERUNS = 3   # flags set (calls rerun eagerly) before a graph is compiled without its checks


class BoundsChecked:
    """Runs `compiled` (the graph with its error flag last); a set flag raises
    IndexOutOfRange before anything is returned or written back. On CUDA the last
    output is "all in range", handed to torch._assert_async (no host sync).

    `unchecked()`, where given, compiles the graph without the checks (its index ops,
    order statistics, ... running through torch, as when the checked graph does not
    compile). In a graph with an order statistic's tie flag (selection.py), after MAX_RERUNS
    calls whose flag was set, that form runs every later call: ties recur with the data
    (top-k of bfloat16 router logits, of a router's uniform probabilities: the indices
    chosen among equal values are eager's partial sort's), and each such call ran the
    compiled graph and then the captured graph eagerly, slower than eager alone. Other
    flags (an index out of range: eager's error) keep the checked graph."""

    def __init__(self, compiled, gm: fx.GraphModule, device: str = "cpu", unchecked=None):
        from .partition import is_random

        self.compiled, self.single = compiled, gm.meta["mlircap_bounds_single"]
        self.uses_rng = any(is_random(n) for n in gm.graph.nodes)
        self.gpu = device == "cuda"
        self.unchecked = unchecked if gm.meta.get("mlircap_bounds_ties") else None
        self.reruns, self.plain = 0, None

    def _rerun(self):
        """A set flag: the call reruns eagerly; the MAX_RERUNS-th compiles the unchecked form."""
        self.reruns += 1
        if self.reruns >= MAX_RERUNS and self.unchecked is not None:
            make, self.unchecked = self.unchecked, None
            try:
                self.plain = make()
            except Exception as e:  # noqa: BLE001 - the checked graph (and its reruns) stays
                logs.log("fallback", f"the graph compiled without its bounds checks failed ({e})")
            else:
                logs.log("fallback", f"bounds checks set their flag on {self.reruns} calls: the graph runs "
                                     "compiled without them from now on (index ops and order statistics "
                                     "through torch)")
        raise IndexOutOfRange()

    def __call__(self, *args):
        if self.plain is not None:
            return self.plain(*args)
        try:
            res = self.compiled(*args)
        except IndexOutOfRange:
            raise
        except Exception as e:  # noqa: BLE001
            # an op run through torch raised before the flag was read: eager, in its order,
            # may meet a failing check first and raise its own error (an unused nll_loss with
            # a bad target before an embedding_bag with a bad index: IndexError, not the
            # bag's RuntimeError: fuzz modules seed 97); the rerun gives eager's error
            raise IndexOutOfRange() from e
        if self.gpu:
            # "all in range": eager's device-side assert (held while a replay's checks on
            # tensor data are pending: capture/device_checks.py)
            if not hold(res[-1]):
                torch._assert_async(res[-1])
        elif bool(res[-1]):
            self._rerun()
        out = res[:-1]
        return out[0] if self.single else type(res)(out)


def rerun_on_bad_index(fn, gm: fx.GraphModule, uses_rng: bool, strict: bool = False):
    """`fn` (aot_autograd's compiled function of the captured graph `gm`), except where a
    bounds check fails: then `gm` itself runs, with eager's kernels (eager's error, or
    eager's result), from the generator state `fn` started with; the 'fallback' log names
    the rerun as an eager island. Under strict=True a rerun that eager completes raises
    MlircapCompileError (the call ran eagerly); eager's own error propagates as it is."""

    def run(*args):
        rng = torch.get_rng_state() if uses_rng else None
        try:
            return fn(*args)
        except IndexOutOfRange:
            if rng is not None:
                torch.set_rng_state(rng)
            logs.log("fallback", "graph split into 1 parts; eager islands: bounds check: an index out of range "
                                 "or a value past a compiled bound (rerun eagerly)")
            out = gm.forward(*args)
            if strict:
                from .backend import MlircapCompileError

                raise MlircapCompileError("a bounds check of the compiled graph failed (an index out of range or "
                                          "a value past a compiled bound, polynomials.py): the call ran eagerly "
                                          "(strict=True)")
            return out

    return run
