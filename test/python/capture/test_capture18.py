"""A frame whose capture gives up inside a callee (a router's data-dependent loop, a scan handed to
torch code) is recorded again once with the call into that callee an uncapturable call, run eagerly
between the frame's compiled graphs (capture/give_ups.py), instead of running eagerly with each
level of its callees recording again on later calls; and a frame that gives up at the same place
for other arguments runs eagerly from then on instead of recording every new shape again."""
import warnings

import torch
import torch.nn as nn

import mlircap


def _stats(g):
    return g._call.stats


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


class _Experts(nn.Module):
    """A loop over the rows a router picked: iterating a tensor whose shape depends on its data,
    which capture gives up on."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, h, sel):
        out = torch.zeros_like(h)
        for i in sel.nonzero():
            out[i[0]] = self.lin(h[i[0]])
        self.calls += 1
        return out


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.experts = _Experts()
        self.post = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.tanh(self.pre(x))
        return self.post(h + self.experts(h, h.sum(-1) > 0))


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Block(), _Block()])
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        self.seen += x.shape[0]
        return x.softmax(-1)


def _pair():
    torch.manual_seed(0)
    ref = _Model()
    m = _Model()
    m.load_state_dict(ref.state_dict())
    return ref, m


def test_callee_that_gives_up_is_broken_around():
    ref, m = _pair()
    g = mlircap.compile(m)
    torch.manual_seed(1)
    xs = [torch.randn(5, 8) for _ in range(6)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in xs:
            assert _same(ref(x), g(x))
            assert torch.equal(ref.seen, m.seen)
            assert [b.experts.calls for b in ref.blocks] == [b.experts.calls for b in m.blocks]
    s = _stats(g)
    # one recording gives up in _Experts.forward, the next breaks around it; the rest replay
    # (before: the model ran eagerly, its blocks recorded on later calls, and so on down)
    assert s.records == 2, s.records
    assert s.replays == 4, s.replays
    ex = g.explain()
    assert ex.graph_count >= 3
    assert any("capture gave up in" in r for r, _ in ex.breaks), ex.breaks


def test_explain_names_the_callee_after_one_call():
    """The first call gave up in _Experts.forward and stored no variant: explain says so."""
    _, m = _pair()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = mlircap.explain(m)(torch.randn(5, 8))
    assert out.variants == 0 and len(out.eager_callees) == 1 and "forward" in out.eager_callees[0]
    assert "Callees capture gave up in" in str(out)


def test_callee_reading_state_the_frame_wrote_reads_the_new_value():
    """The frame writes an attribute the failing callee reads: the replay wrote at its end, so the
    callee run between graphs would read the old value, and the frame ran eagerly. Since
    flush_writes (54c5750) the write is made right before the callee's eager call: outputs match
    eager's and so does the attribute (a mean the graph computes: to float32 rounding), and the
    frame replays."""
    class Scaled(_Experts):
        def forward(self, h, sel):
            return super().forward(h, sel) * self.scale

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = Scaled()
            self.experts.scale = torch.ones(())

        def forward(self, x):
            h = torch.tanh(x)
            self.experts.scale = x.mean()
            return self.experts(h, h.sum(-1) > 0) + 1

    torch.manual_seed(0)
    ref, m = Outer(), Outer()
    m.load_state_dict(ref.state_dict())
    g = mlircap.compile(m)
    torch.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(5):
            x = torch.randn(5, 8)
            assert _same(ref(x), g(x))
            assert _same(ref.experts.scale, m.experts.scale)
    assert _stats(g).replays >= 2   # (the first call gives up in the callee, the second records around it)


def test_frame_giving_up_for_other_shapes_records_twice():
    """A frame that gives up in its own code at one place for two argument shapes gives up
    whatever the shape: later shapes run eagerly, not recorded each (100x+ an eager call)."""
    def f(x):
        out = torch.zeros_like(x)
        for i in (x.sum(-1) > 0).nonzero():
            out[i[0]] = x[i[0]].exp()
        return out * 2

    g = mlircap.compile(f)
    torch.manual_seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(2, 9):
            x = torch.randn(n, 4)
            assert _same(f(x), g(x))
    s = _stats(g)
    assert s.records == 2, s.records
    assert s.eager_calls == 5, s.eager_calls


def _train_step(schedule):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
    sched = schedule(opt)

    def step(x, y):
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        return loss.detach(), sched.get_last_lr()[0]
    return step, m, opt, sched


def _check_train_steps(schedule, n=6):
    fe, me, oe, se = _train_step(schedule)
    fc, mc, oc, sc = _train_step(schedule)
    g = mlircap.compile(fc)
    torch.manual_seed(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(n):
            x, y = torch.randn(4, 8), torch.randn(4, 1)
            (le, lre), (lc, lrc) = fe(x, y), g(x, y)
            assert torch.allclose(le, lc, rtol=1e-5) and lre == lrc
            assert se.last_epoch == sc.last_epoch and oe.param_groups[0]["lr"] == oc.param_groups[0]["lr"]
            assert all(torch.allclose(p, q, rtol=1e-5, atol=1e-6) for p, q in zip(me.parameters(), mc.parameters()))
            assert all(torch.equal(oe.state[p]["step"], oc.state[q]["step"])
                       for p, q in zip(me.parameters(), mc.parameters()))
    return g


def test_scheduled_optimizer_step_is_one_call_and_compiles_once():
    """An LR scheduler wraps `opt.step` (an instance attribute, torch's lr_scheduler.py): still
    the optimizer's step, one call between graphs (it was traced op by op, its `.item()`s breaking
    the graph, and capture gave up); the scheduler's step is a call replayed between graphs (its
    `last_epoch`, diffed at the recording's end and guarded by value, recompiled every call), and
    `sched.get_last_lr()[0]`, a new value every call, is returned as read after it."""
    g = _check_train_steps(lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9 ** s))
    s = _stats(g)
    assert (s.records, s.replays, s.eager_calls) == (1, 5, 0), (s.records, s.replays, s.eager_calls)
    assert any("Adam.step" in r and "LRScheduler.step" in r for r, _ in g.explain().breaks)
    # (the learning rate returned is not guarded by value: a replay would miss on it every call)
    assert not any("_last_lr[0] ==" in p.guard.describe() for p in g._call.variants[0].mid_guards)


def test_torch_schedulers_without_lambdas():
    g = _check_train_steps(lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10))
    s = _stats(g)
    assert (s.records, s.replays) == (1, 5), (s.records, s.replays)
