"""Writes flushed before a graph break (capture/flush_writes.py): the function writes external
state, then calls something run eagerly between graphs that reads it (a module capture gave up
in, an optimizer's step after `group["lr"] = ...`, a print of the written dict).  The replay
makes the writes recorded so far right before that call, so the frame stays captured around it;
before, the whole frame ran eagerly ("the function wrote state before a call into X").

Each test compares outputs and the written state with eager after every call (graphs run by the
eager backend: bit-identical), with guarded values changing between calls, and checks the frame
is no longer run eagerly."""
import contextlib
import copy
import io
import warnings

import torch
import torch.nn as nn

from harness import EAGER
from mlircap.capture import capture


class Holder:
    def __init__(self):
        self.bias = torch.zeros(())
        self.tag = "a"


class Experts(nn.Module):
    """A data-dependent loop over what a router picked (DBRX's experts): capture gives up in it,
    later recordings run it eagerly between graphs.  It reads what its caller wrote."""

    def forward(self, x, holder):
        for e in (x > 0).nonzero():
            x = x + holder.bias * e[0] + len(holder.tag)
        return x, int((x > 1).sum())


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = Holder()
        self.experts = Experts()
        self.lin = nn.Linear(4, 4)
        self.mode = 1

    def forward(self, x):
        h = self.lin(x) + 0.1 * torch.randn(3, 4)   # (a replay drawing: one that misses records again)
        self.holder.bias = self.holder.bias * 0.5 + h.sum()   # (depends on the old value: made once)
        self.holder.tag = "abc" if self.mode else "x"
        y, n = self.experts(h, self.holder)
        if n > 3:   # (the count the eager call returns decides a branch: a replay may miss here)
            y = y - 1
        if y[0, 0] > y[1, 0]:   # (a tensor branch checked after the graph: a replay misses once it flips,
            y = y * 3     # after the flushed writes, which it puts back before recording again)
        return y * 2


def _same(a, b):
    assert a.shape == b.shape and torch.equal(a, b)


def _run(n=8):
    torch.manual_seed(0)
    eager = Outer()
    comp = copy.deepcopy(eager)
    g = capture(comp, backend=EAGER)
    for i in range(n):
        if i == 5:   # a guarded value changes
            eager.mode = comp.mode = 0
        x = torch.randn(3, 4) * (1 + i % 3)
        with torch.no_grad():
            torch.manual_seed(i)
            want = eager(x)
            torch.manual_seed(i)
            got = g(x)
        _same(want, got)
        _same(eager.holder.bias, comp.holder.bias)
        assert eager.holder.tag == comp.holder.tag, i
    return g


def test_writes_reach_a_module_run_eagerly_between_graphs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = _run()
    ex = g.explain()
    assert not any("wrote state before" in r for r in ex.eager_reasons), ex.eager_reasons


class LrStep(nn.Module):
    """A training step that sets its param groups' lr (a warmup factor set between calls) and
    then steps the optimizer, inside the compiled function."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.opt = torch.optim.SGD(self.lin.parameters(), lr=0.1, momentum=0.9)
        self.warm = 1.0

    def forward(self, x, y):
        self.opt.zero_grad()
        loss = ((self.lin(x) - y) ** 2).mean()
        loss.backward()
        for grp in self.opt.param_groups:
            grp["lr"] = 0.1 * self.warm
        self.opt.step()
        return loss.detach()


def test_lr_set_before_the_optimizer_step():
    torch.manual_seed(0)
    eager = LrStep()
    comp = copy.deepcopy(eager)
    comp.opt = torch.optim.SGD(comp.lin.parameters(), lr=0.1, momentum=0.9)
    g = capture(comp, backend=EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(7):
            if i in (3, 5):
                eager.warm = comp.warm = 0.5 / i
            x, y = torch.randn(5, 4), torch.randn(5, 2)
            _same(eager(x, y), g(x, y))
            for p, q in zip(eager.lin.parameters(), comp.lin.parameters()):
                _same(p, q)
            assert eager.opt.param_groups[0]["lr"] == comp.opt.param_groups[0]["lr"], i
    ex = g.explain()
    assert not ex.eager_reasons, ex.eager_reasons


def test_print_sees_the_written_dict():
    def make():
        m = {"a": 0.0, "b": "x"}

        def f(x, s):
            m["b"] = s
            print(m)
            return x * 2
        return m, f
    outs = []
    for compiled in (False, True):
        m, f = make()
        g = capture(f, backend=EAGER) if compiled else f
        buf, got = io.StringIO(), []
        with contextlib.redirect_stdout(buf):
            for s in ("p", "q", "q", "r"):
                got.append((g(torch.ones(2), s), dict(m)))
        outs.append((buf.getvalue(), [(dict(d), r.tolist()) for r, d in got]))
    assert outs[0] == outs[1]
    assert not g.explain().eager_reasons
