"""Writes flushed before a graph break, continued (capture/flush_writes.py): kinds of pending
writes that used to block the flush, so that the whole frame ran eagerly ("the function wrote
state before a call into X", "Optimizer.zero_grad reads the optimizer's param_groups ... the
function wrote before it"):
* an int counter (`self.step_n += 1`, counters.py) and a number computed from it stored before
  the call (`group["lr"] = f(self.step_n)`, flow_writes.py): flushed as their expressions of the
  values bound at the replay's start, not guarded by value (no new recording per call).

Each test compares outputs and the written state with eager after every call (graphs run by the
eager backend: bit-identical), including calls where a guard after the flushed call misses
(the replay puts the flushed writes back and records again), and checks that the frame is no
longer run eagerly."""
import collections
import copy
import math
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness import EAGER
from mlircap.capture import capture


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and torch.equal(a, b), (a, b)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b, (a, b)


class CosineByHand(nn.Module):
    """A Python step counter, a cosine lr computed from it set into a param group, then the
    optimizer's zero_grad / step inside the function (bench/modules10.py's param-groups case)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.opt = torch.optim.AdamW([{"params": [self.lin.weight]}, {"params": [self.lin.bias], "lr": 3e-2}],
                                     lr=1e-2)
        self.step_n = 0

    def forward(self, x, y):
        self.step_n += 1
        self.opt.param_groups[1]["lr"] = 3e-2 * 0.5 * (1 + math.cos(math.pi * self.step_n / 10))
        self.opt.zero_grad(set_to_none=True)
        out = self.lin(x)
        loss = F.cross_entropy(out, y)
        if out[0, 0] > out[0, 1]:   # (a tensor branch after the flush: a replay misses when it flips,
            loss = loss * 2         # puts the flushed writes back and records again)
        loss.backward()
        self.opt.step()
        return loss.detach(), self.opt.param_groups[1]["lr"]


def _state(m):
    return [p.detach().clone() for p in m.parameters()], m.step_n, [g["lr"] for g in m.opt.param_groups]


def test_counter_and_lr_from_it_flushed_before_zero_grad():
    torch.manual_seed(0)
    eager = CosineByHand()
    comp = copy.deepcopy(eager)
    g = capture(comp, backend=EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(9):
            if i == 6:   # written between calls: the counter's value is read, not a recorded constant
                eager.step_n = comp.step_n = 20
            x, y = torch.randn(6, 4) * (1 + i % 3), torch.randint(0, 2, (6,))
            _same(eager(x, y), g(x, y))
            _same(_state(eager), _state(comp))
    ex = g.explain()
    assert not ex.eager_reasons, ex.eager_reasons
    # the counter is no guarded value: a few recordings (the branch's two ways, the miss), not one per call
    assert ex.variants <= 3, (ex.variants, ex.recompile_reasons)
    assert any("mid-replay" in r for r in ex.recompile_reasons), ex.recompile_reasons   # (a miss after the flush)


class _Collector:
    """An output collector the way transformers' output capturing keeps one (a holder whose
    attribute the model sets to a new container before running its layers, which the layers'
    hooks fill, and resets after)."""

    def __init__(self):
        self.active = None
        self.compiling = False


COLLECT = _Collector()


class Layers(nn.Module):
    """A data-dependent loop over what a router picked: capture gives up in it, later
    recordings run it eagerly between graphs.  It fills the active collector."""

    def forward(self, x):
        d = COLLECT.active
        for e in (x > 0).nonzero():
            x = x + 0.5 * e[0]
        if d is not None:
            d["hidden"].append(x * 1)
        return x[:, :2 + int((x > 1).sum()) % 3]   # (its shape, guarded after the call, changes with the data)


class Collecting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.layers = Layers()

    def forward(self, x):
        out = collections.defaultdict(list)   # a new container stored where the callee reads it
        COLLECT.active = out
        COLLECT.compiling = True
        y = self.layers(self.lin(x))
        COLLECT.active = None
        COLLECT.compiling = False
        return y * 3, tuple(out["hidden"]), len(out)


def test_new_container_written_before_a_break():
    torch.manual_seed(0)
    eager = Collecting()
    comp = copy.deepcopy(eager)
    g = capture(comp, backend=EAGER)
    shapes = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(8):
            x = torch.randn(3, 4) * (1 + i % 3)
            with torch.no_grad():
                want = eager(x)
                got = g(x)
            _same(want, got)
            assert COLLECT.active is None and COLLECT.compiling is False, i
            shapes.add(want[0].shape)
    assert len(shapes) > 1   # (a guard after the call missed: the rest of the frame ran from there)
    ex = g.explain()
    assert not ex.eager_reasons, ex.eager_reasons


class CollectingThenBranch(Collecting):
    def forward(self, x):
        out = collections.defaultdict(list)
        COLLECT.active = out
        y = self.layers(self.lin(x))
        COLLECT.active = None
        if y[0, 0] > y[1, 0]:   # (a miss here records again with the call's logged result, not
            y = y * 3           # run: the collector that recording makes gets the replay's contents)
        return y, tuple(out["hidden"])


def test_new_container_then_a_miss_records_again_with_its_contents():
    torch.manual_seed(0)
    eager = CollectingThenBranch()
    comp = copy.deepcopy(eager)
    g = capture(comp, backend=EAGER)
    flips = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(8):
            x = torch.randn(3, 4)
            with torch.no_grad():
                want = eager(x)
                got = g(x)
            _same(want, got)
            assert COLLECT.active is None, i
            flips.add(bool(want[0][0, 0] > want[0][1, 0]))
    assert flips == {True, False}
    ex = g.explain()
    assert not ex.eager_reasons, ex.eager_reasons
    assert any("mid-replay" in r for r in ex.recompile_reasons), ex.recompile_reasons


def _closure_program():
    """A closure's variable set by the function (`nonlocal`) before it calls a helper that reads
    it and that capture gives up in (run eagerly between graphs)."""
    scale = 1.0
    mode = "sum"

    def helper(x):
        for e in (x > 0).nonzero():   # (a data-dependent loop: capture gives up in it)
            x = x + scale * e[0]
        return x.sum(0) if mode == "sum" else x.amax(0)

    def f(x, s):
        nonlocal scale, mode
        scale = s
        mode = "sum" if s > 0.5 else "max"
        y = helper(torch.tanh(x))
        if y[0] > y[1]:   # (a tensor branch after the flush: a replay misses when it flips, puts
            y = y + 1     # the cells back and records again)
        return y * 2

    def state():
        return scale, mode
    return f, state


def test_closure_cell_written_before_a_break():
    f_e, st_e = _closure_program()
    f_c, st_c = _closure_program()
    g = capture(f_c, backend=EAGER)
    flips = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(8):
            x, s = torch.randn(3, 4), (0.25, 0.75, 2.0)[i % 3]
            x[:, i % 2] += 2   # (the branch after the call flips: a replay misses there, the rest of
            want = f_e(x, s)   # the frame runs from there, the cells written)
            _same(want, g(x, s))
            assert st_e() == st_c(), i
            flips.add(bool(want[0] > want[1]))   # (the branch taken: 2 * (y + 1) keeps the order)
    assert flips == {True, False}
    ex = g.explain()
    assert not ex.eager_reasons, ex.eager_reasons


def _log_program():
    """A list appended to and a set added to by the function before it calls a helper that
    reads them and that capture gives up in."""
    log = []
    seen = set()

    def helper(x):
        for e in (x > 0).nonzero():   # (a data-dependent loop: capture gives up in it)
            x = x + 0.1 * e[0]
        return x * len(log) + len(seen)

    def f(x, tag):
        log.append(tag)
        seen.add(tag)
        y = helper(torch.tanh(x))
        if y[0, 0] > y[1, 0]:   # (a tensor branch after the flush: a replay misses when it flips)
            y = y + 1
        return y

    def state():
        return list(log), set(seen)
    return f, state


def test_list_append_and_set_add_before_a_break():
    f_e, st_e = _log_program()
    f_c, st_c = _log_program()
    g = capture(f_c, backend=EAGER)
    flips = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(10):
            x, tag = torch.randn(3, 4), ("a", "b", "c")[i % 3] if i < 6 else "a"
            x[i % 2] += 2   # (the branch after the call flips)
            want = f_e(x, tag)
            _same(want, g(x, tag))
            assert st_e() == st_c(), i
            flips.add(bool(want[0, 0] > want[1, 0]))
    assert flips == {True, False}
    ex = g.explain()
    assert not ex.eager_reasons, ex.eager_reasons


def _sched(opt, x):
    """Capture gives up in it (a data-dependent loop): run eagerly between graphs, it sets the lr."""
    for e in (x > 0).nonzero():
        x = x + e[0]
    opt.param_groups[0]["lr"] = round(float(x.mean()), 3)


class LrThenSchedule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.opt = torch.optim.SGD(self.lin.parameters(), lr=0.1)

    def forward(self, x):
        self.opt.param_groups[0]["lr"] = 0.5   # flushed before zero_grad
        self.opt.zero_grad()
        _sched(self.opt, x)                    # a later call writes the item again
        return self.lin(x) * 2, dict(self.opt.param_groups[0])["lr"]


def test_item_flushed_then_written_by_a_later_call_is_guarded_again():
    torch.manual_seed(0)
    eager = LrThenSchedule()
    comp = copy.deepcopy(eager)
    comp.opt = torch.optim.SGD(comp.lin.parameters(), lr=0.1)
    g = capture(comp, backend=EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(6):
            x = torch.randn(3, 4) + i
            with torch.no_grad():
                _same(eager(x), g(x))
            assert eager.opt.param_groups[0]["lr"] == comp.opt.param_groups[0]["lr"], i
    ex = g.explain()
    assert not ex.eager_reasons, ex.eager_reasons
