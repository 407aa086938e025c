"""Data-dependent checks inside an op, compiled speculatively and guarded.

Some ops decide something from tensor data while they run: a check that raises
(`gaussian_nll_loss`: `if torch.any(var < 0): raise ValueError`; `cov`'s
`TORCH_CHECK(at::equal(fweights, fweights.round()))`) or a branch (`cov` zeroes a
non-positive normalization factor). Fake tensors have no data, so aot_autograd
failed on the graph and ddsplit.py ran the whole op as an eager island.

`speculative` compiles such a graph for the decisions eager took instead:

* the captured graph runs once eagerly at compile time, on copies of the example
  inputs (random number generator state restored), recording every boolean or integer a
  kernel read from tensor data (`_local_scalar_dense` of a bool or integer tensor,
  `aten.equal`): the plan. An integer read is a position or size an op takes from a
  tensor (`narrow` with a tensor start reads it with `.item()`): the graph is compiled
  for that value, a view or slice at a constant offset as eager makes it;
* aot_autograd traces it with fake tensors answering those reads from the plan, in
  order, and keeping them in the graph (they are made side-effectful for the trace);
* the backend replaces each read by one more graph output, the tensor it read
  (`equal(a, b)` as `all(a == b)`, an integer read as `t == value`): compiled with the
  rest, a guard;
* after each compiled call, a guard whose value differs from the plan discards the
  results (before aot_autograd writes anything back) and the captured graph reruns
  eagerly: eager's error, or eager's other branch. After `MAX_MISSES` such calls
  the graph is compiled around the op instead, the op running through torch (ddsplit.py,
  what it did without speculation), or where that fails, runs eagerly for good (the data
  keeps taking another path: a window start that moves every call).

Only boolean and integer reads (a float read is not speculated), only when every example input is a real tensor and none
requires grad (inference graphs), and the graph reads no module state (the
compile-time run would update a buffer). Under strict=True the graph runs compiled
the same way, and a call whose guard fails raises MlircapCompileError instead of
rerunning eagerly.
"""
from __future__ import annotations

import contextlib

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode

from . import logs
from .fxutil import bool_like

aten = torch.ops.aten
MAX_MISSES = 3
_READS = (aten._local_scalar_dense.default, aten.equal.default)


def _integer(dtype: torch.dtype) -> bool:
    return dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class GuardFailed(Exception):
    """A speculated decision differs from the one the data takes: rerun eagerly."""


class _Observe(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen: list[bool | int] = []
        self.other = False   # a read of another number (.item() of a float): not speculated

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is aten._local_scalar_dense.default:
            if args[0].dtype == torch.bool:
                self.seen.append(bool(out))
            elif _integer(args[0].dtype):
                self.seen.append(int(out))
            else:
                self.other = True
        elif func is aten.equal.default:
            self.seen.append(bool(out))
        return out


def observe(gm: fx.GraphModule, example_inputs) -> list[bool | int] | None:
    """The boolean and integer data reads of one eager run of `gm` on copies of the
    inputs, or None."""
    from torch._subclasses.fake_tensor import FakeTensor

    if not all(isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) and not x.requires_grad
               and x.layout == torch.strided for x in example_inputs):
        return None
    if any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        return None   # state outside the inputs (a buffer updated in place) would change
    cuda = any(x.is_cuda for x in example_inputs)
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if cuda else None
    mode = _Observe()
    try:
        with torch.no_grad():
            copies = [x.clone() for x in example_inputs]
            with mode:
                gm.forward(*copies)
    except Exception:  # noqa: BLE001 - eager itself fails here: nothing to speculate
        return None
    finally:
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    if mode.other or not mode.seen or len(mode.seen) > 64:
        return None
    return mode.seen


@contextlib.contextmanager
def answering(plan: list[bool | int]):
    """Fake tensors answer boolean and integer data reads from `plan` (in order,
    restarting with each trace of the graph: aot_autograd traces it more than once),
    and the reads stay in the traced graph."""
    from torch._subclasses import fake_impls

    impls = fake_impls.op_implementations_dict
    old = impls.get(aten._local_scalar_dense.default)
    count = [0]

    def answer(*args):
        v = plan[count[0] % len(plan)]
        count[0] += 1
        return v

    def local_scalar_dense(fake_mode, func, arg):
        if arg.dtype != torch.bool and not _integer(arg.dtype):
            return old(fake_mode, func, arg)
        return answer()

    def equal(fake_mode, func, a, b):
        return answer()

    effectful = torch.fx.node._side_effectful_functions
    added = [f for f in _READS if f not in effectful]
    impls[aten._local_scalar_dense.default] = local_scalar_dense
    fake_impls.op_implementations_checks.insert(0, (lambda f: f is aten.equal.default, equal))
    effectful.update(added)
    try:
        yield
    finally:
        impls[aten._local_scalar_dense.default] = old
        fake_impls.op_implementations_checks.pop(0)
        effectful.difference_update(added)


def take_guards(gm: fx.GraphModule, plan: list[bool | int]) -> list[bool] | None:
    """Replaces the data reads of the traced graph `gm` by guard outputs (appended to
    its outputs, in order); returns the values they must have, or None when the
    reads do not match the plan. An integer read's guard is `t == value` (True)."""
    reads = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in _READS]
    if len(reads) != len(plan):
        return None
    out = gm.graph.output_node()
    outs = list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
    guards, expected = [], []
    for n, want in zip(reads, plan):
        if n.users:
            return None   # the value flows into the graph (not a decision): not handled
        with gm.graph.inserting_before(n):
            if n.target is aten.equal.default:
                a, b = n.args[:2]
                va, vb = a.meta.get("val"), b.meta.get("val")
                if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor):
                    return None
                if va.shape != vb.shape:
                    if want:
                        return None
                    gm.graph.erase_node(n)   # different shapes: never equal, nothing to check
                    continue
                eq = gm.graph.call_function(aten.eq.Tensor, (a, b))
                eq.meta["val"] = bool_like(va, va.shape)
                g = gm.graph.call_function(aten.all.default, (eq,))
            else:
                v = n.args[0].meta.get("val") if isinstance(n.args[0], fx.Node) else None
                if not isinstance(v, torch.Tensor) or (v.dtype == torch.bool) != (type(want) is bool):
                    return None
                g = gm.graph.call_function(aten.reshape.default, (n.args[0], []))
                if type(want) is not bool:   # an integer read: the graph holds for this value only
                    g.meta["val"] = v.new_empty(())
                    g = gm.graph.call_function(aten.eq.Scalar, (g, want))
                    want = True
            g.meta["val"] = bool_like(va if n.target is aten.equal.default else v, ())
        guards.append(g)
        expected.append(want)
        gm.graph.erase_node(n)
    out.args = (tuple(outs + guards),)
    gm.graph.lint()
    gm.recompile()
    return expected


def checked(compiled, expected: list[bool]):
    """`compiled` (returning its outputs plus the guards) returning its outputs, or
    raising GuardFailed when a guard differs from `expected`."""
    k = len(expected)

    def run(*args):
        res = list(compiled(*args))
        for g, want in zip(res[len(res) - k:], expected):
            if bool(g) != want:
                raise GuardFailed()
        return res[:len(res) - k]

    return run


def rerun_on_failed_guard(fn, gm: fx.GraphModule, strict: bool = False, around=None):
    """`fn` (aot_autograd's function of the speculated graph), except where a guard
    fails: then `gm` runs eagerly, from the generator state `fn` started with
    (`strict`: MlircapCompileError instead). After `MAX_MISSES` failed guards,
    `around(args)` (the graph compiled around its data-dependent op, for these inputs;
    None where it cannot be) runs every call, else `gm` eagerly."""
    misses = [0]
    after: list = []   # [the function run once the misses are spent]

    def run(*args):
        if misses[0] >= MAX_MISSES:
            if not after:
                split = None
                if around is not None:
                    try:
                        split = around(list(args))
                    except Exception as e:  # noqa: BLE001 - eager below: the captured graph as it is
                        logs.log("fallback", f"the graph compiled around its data-dependent op failed ({e}): "
                                             "it runs eagerly")
                after.append(split or gm.forward)
            return after[0](*args)
        rng = torch.get_rng_state()
        try:
            return fn(*args)
        except GuardFailed:
            if strict:
                from .backend import MlircapCompileError

                raise MlircapCompileError(
                    "a data-dependent decision compiled as eager took it on the example inputs went the "
                    "other way for these inputs: the graph would run eagerly (strict=True)") from None
            misses[0] += 1
            logs.log("fallback", f"graph split into 1 parts; eager islands: speculated data-dependent decision: "
                                 f"the data took another path (rerun eagerly, {misses[0]}/{MAX_MISSES})")
            torch.set_rng_state(rng)
            return gm.forward(*args)

    return run
