"""Capture defects of issue 11 (capture rate and training-loop continuations): torch.func transforms
called inside a captured function (functorch_calls.py), gradient clipping and a number read right
after a training step's break (grad_clips.py, deferred.py), and a frame that writes state before a
callee capture gave up in, whose callers each recorded the whole call again one level deeper per call
(give_ups.pass_through_codes)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

from harness import EAGER
from mlircap.capture import capture, explain

W = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))


# -- torch.func transforms: uncapturable calls between graphs, their functions made again at replay --
def f_grad(x):
    return grad(lambda z: (z ** 3).sum())(x.sin()) * 2


def f_jacrev_closure(x):
    y = x.sin() * 2
    return jacrev(lambda z: (W @ z * y).tanh())(y).sum(0) + y


def f_jacfwd(x):
    return jacfwd(lambda z: z.sin() * z)(x).sum(1)


def f_hessian(x):
    return hessian(lambda z: (z ** 3).sum())(x).sum(0)


def f_vjp(x):
    out, back = vjp(lambda z: z.exp() * W.sum(), x)
    return back(torch.ones_like(out))[0] + out


def f_jvp(x):
    return jvp(lambda z: z.sin(), (x,), (torch.ones_like(x),))[1] * 3


def f_jvp_then_vjp(x, t=None, c=None):
    def f(v):
        return torch.sin(v) * v.exp().cumsum(0)
    out, jt = jvp(f, (x,), (x.cos() if t is None else t,))
    _, pull = vjp(f, x)   # (pull: a closure vjp makes each call, opaque: was guarded by identity)
    (ct,) = pull(x * 2 if c is None else c)
    return out + jt + ct


def f_vmap_grad(x):
    return vmap(grad(lambda z: (z * z * x.mean()).sum()))(x.reshape(-1, 3))


@pytest.mark.parametrize("fn", [f_grad, f_jacrev_closure, f_jacfwd, f_hessian, f_vjp, f_jvp, f_jvp_then_vjp,
                                f_vmap_grad],
                         ids=lambda f: f.__name__)
def test_torch_func_transforms_run_between_graphs(fn):
    # they raised under capture ('Cannot access data pointer of Tensor that doesn't have storage':
    # the transform's ops were recorded with its wrapped tensors), or ran the function eagerly
    # (vmap of grad: 'cannot reproduce value of type function').  A transform of pure tensor code
    # (its cells tensors; forward mode only where no tensor requires grad) is one node of the
    # graph since session 25 (transform_nodes.py); one whose function reads a global tensor (W)
    # still runs between graphs
    ex = explain(fn, EAGER)
    for i in range(4):
        x = torch.randn(6) + i
        out = ex(x)
        assert torch.allclose(ex.captured(x), fn(x), rtol=1e-5, atol=1e-6), i
    assert out.variants == 1 and not out.eager_reasons, out
    if fn in (f_jacrev_closure, f_vjp):   # (a global tensor read, W)
        assert 1 <= out.break_count <= 2 and out.graph_count >= 1, out
    else:
        assert out.break_count == 0 and out.graph_count == 1, out


def test_the_function_vjp_returns_is_not_guarded_by_identity():
    # called from a traced helper (here a module's forward), the closure vjp returns, new each
    # call, was guarded by identity: every call recorded again
    m = type("M", (nn.Module,), {"forward": lambda self, *a: f_jvp_then_vjp(*a)})()
    ex = explain(m, EAGER)
    for i in range(4):
        a = [torch.randn(6) for _ in range(3)]
        out = ex(*a)
        assert torch.allclose(ex.captured(*a), f_jvp_then_vjp(*a), rtol=1e-5, atol=1e-6), i
    assert out.variants == 1 and not out.eager_reasons, out


def test_per_sample_grads_of_a_module_through_functional_call():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def per_sample(xs, ys):
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss_fn(p, x, y):
            return ((functional_call(model, p, (x.unsqueeze(0),)) - y) ** 2).mean()
        g = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, xs, ys)
        return {k: v.norm(dim=tuple(range(1, v.dim()))) for k, v in g.items()}
    ex = explain(per_sample, EAGER)
    for i in range(3):
        xs, ys = torch.randn(5, 4), torch.randn(5, 1)
        out = ex(xs, ys)
        got, want = ex.captured(xs, ys), per_sample(xs, ys)
        assert all(torch.allclose(got[k], want[k], rtol=1e-5, atol=1e-6) for k in want), i
    # (one node of the graph since transform_closures.py: the function reads the program's module)
    assert out.variants == 1 and not out.eager_reasons and out.break_count == 0 and out.graph_count == 1, out


def test_a_closure_writing_its_cell_runs_eagerly():
    def counted(x):
        n = 0

        def f(z):
            nonlocal n
            n += 1
            return (z * z).sum()
        return grad(f)(x) + n
    ex = explain(counted, EAGER)
    for i in range(3):
        x = torch.randn(3)
        out = ex(x)
        assert torch.equal(ex.captured(x), counted(x))
    assert out.eager_reasons and "torch.func transform" in out.eager_reasons[0], out


# -- a training step: clipping and the returned loss with the break of backward / step ------------
def _train(kind):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)

    def step(x, y):
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        if kind == "clip":
            nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        elif kind == "clip_value":
            nn.utils.clip_grad_value_(list(m.parameters()), 0.05)
        opt.step()
        if kind == "sched":
            sched.step()
        opt.zero_grad()
        return loss.item()
    return step, m, opt


@pytest.mark.parametrize("kind", ["plain", "clip", "clip_value", "sched"])
def test_training_step_is_one_graph_and_one_break(kind):
    # clip_grad_norm_ opened a graph of its own after backward's break, which the optimizer's step
    # split off again (3 graphs, 2 breaks); `return loss.item()` after the step was a graph of one
    # clone (2 graphs)
    f, m, opt = _train(kind)
    g, mg, optg = _train(kind)
    ex = explain(g, EAGER)
    for i in range(5):
        x, y = torch.randn(4, 8) * (i + 1), torch.randn(4, 1)
        want = f(x, y)
        out = ex(x, y)
        assert out.variants == 1, out
        # (the first call's loss went into the report: compare the state it left and the next calls)
        for p, q in zip(m.parameters(), mg.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), i
        assert opt.param_groups[0]["lr"] == optg.param_groups[0]["lr"]
        for p, q in zip(m.parameters(), mg.parameters()):
            assert torch.allclose(opt.state[p]["momentum_buffer"], optg.state[q]["momentum_buffer"], atol=1e-6)
        assert type(want) is float
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    assert f(x, y) == pytest.approx(ex.captured(x, y), rel=1e-6)
    out = ex.captured.explain()
    assert out.graph_count == 1 and out.break_count == 1 and out.variants == 1, out


def test_clip_before_any_break_stays_in_the_graph():
    m = nn.Linear(4, 4)
    for p in m.parameters():
        p.grad = torch.randn_like(p)

    def clip_and_scale(x):
        n = nn.utils.clip_grad_norm_(m.parameters(), 0.1)
        return x * n
    ref = [p.grad.clone() for p in m.parameters()]
    ex = explain(clip_and_scale, EAGER)
    out = ex(torch.ones(3))
    assert out.graph_count == 1 and out.break_count == 0, out
    assert all(p.grad.norm() <= r.norm() for p, r in zip(m.parameters(), ref))


# -- a frame writing state before a callee capture gave up in: its callers ran eagerly one level a call --
class _Collector:
    def __init__(self):
        self.active = None


COLLECT = _Collector()


class _Experts(nn.Module):
    """A data-dependent loop over the experts hit (Switch / Mixtral style): capture gives up in it."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8, 8) / 3)

    def forward(self, h, idx):
        out = torch.zeros_like(h)
        hit = torch.greater(F.one_hot(idx, 4).sum(0), 0).nonzero()
        for e in hit:
            rows = torch.where(idx == e[0])[0]
            out.index_add_(0, rows, h[rows] @ self.w[e[0]])
        return out


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.router, self.experts = nn.Linear(8, 8), nn.Linear(8, 4), _Experts()

    def forward(self, h):
        h = h + self.attn(h).relu()
        idx = self.router(h).argmax(-1)
        if COLLECT.active is not None:
            COLLECT.active.append(idx.float().mean())
        return h + self.experts(h, idx)


def _collecting(fn):
    def wrapper(self, *args):
        COLLECT.active = []   # (a write to state before the experts' call, as transformers' collector)
        try:
            return fn(self, *args), len(COLLECT.active)
        finally:
            COLLECT.active = None
    return wrapper


def _level(fn):
    def wrapper(self, *args):
        return fn(self, *args)
    return wrapper


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(2))

    @_level
    @_level
    @_level
    @_collecting
    def forward(self, h):
        for b in self.blocks:
            h = b(h)
        return h


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.stack = nn.Linear(4, 8), _Stack()

    @_level
    @_level
    def forward(self, x):
        return self.stack(self.embed(x))


def _recordings(c):
    return c.n_recorded + sum(_recordings(ch) for _, ch in c.callees.by_key.values())


def test_callers_of_a_writing_frame_stop_recording_at_once():
    torch.manual_seed(0)
    model = _Model()

    def run(x):
        out, n = model(x)
        return out.sum(-1), n
    g = capture(run, EAGER)
    per_call = []
    for i in range(7):
        x = torch.randn(12, 4)
        before = _recordings(g._mlircap_capture)
        got = g(x)
        per_call.append(_recordings(g._mlircap_capture) - before)
        want = run(x)
        assert torch.allclose(got[0], want[0], rtol=1e-5, atol=1e-6) and got[1] == want[1] == 2, i
        assert COLLECT.active is None
    # each of the 6 levels above the collector's frame recorded the whole call on a call of its own
    assert sum(per_call[4:]) == 0, per_call


# -- continuations through a training loop: the loop's range iterator, the break of loss.backward() --
class _InnerLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 3))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-2, weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=10)

    def forward(self, x, y):
        losses = []
        for _ in range(2):
            self.opt.zero_grad()
            loss = F.cross_entropy(self.net(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
            self.opt.step()
            self.sched.step()
            losses.append(loss.item())
        return torch.tensor(losses), self.net(x).detach()


def test_training_loop_inside_the_function_is_captured():
    # guards after the optimizer's step needed a continuation, which the loop's range iterator on
    # the value stack and backward's break (made inside Tensor.backward) had none of: the whole
    # function ran eagerly
    torch.manual_seed(0)
    ref, m = _InnerLoop(), _InnerLoop()
    m.load_state_dict(ref.state_dict())
    ex = explain(m, EAGER)
    for i in range(4):
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        want = ref(x, y)
        out = ex(x, y) if i == 0 else None
        got = m(x, y) if i == 0 else ex.captured(x, y)
        if i == 0:
            ref(x, y)   # (explain's call and the call above each made a step)
        else:
            assert torch.allclose(got[0], want[0], rtol=1e-5) and torch.allclose(got[1], want[1], rtol=1e-4, atol=1e-5)
        for p, q in zip(ref.parameters(), m.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), i
        assert ref.opt.param_groups[0]["lr"] == m.opt.param_groups[0]["lr"]
        assert ref.sched.last_epoch == m.sched.last_epoch
    out = ex.captured.explain()
    assert not out.eager_reasons and out.variants == 1, out


def test_numbers_read_after_clipping_stay_deferred():
    # clip_grad_norm_ run with backward's break started a new epoch (as an uncapturable call that
    # may write Python state): the two .item()s after it became breaks of their own (4 graphs, 3
    # breaks; PPO's approx-KL / clip fraction logging, bench/modules7.py)
    torch.manual_seed(0)
    pi = nn.Linear(4, 3)

    def ppo(obs, act, old_logp, adv):
        for p in pi.parameters():
            p.grad = None
        logp = torch.log_softmax(pi(obs), -1).gather(-1, act[:, None]).squeeze(-1)
        ratio = torch.exp(logp - old_logp)
        loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        loss.backward()
        gn = nn.utils.clip_grad_norm_(pi.parameters(), 0.5)
        with torch.no_grad():
            kl = ((ratio - 1) - (logp - old_logp)).mean().item()
            frac = ((ratio - 1).abs() > 0.2).float().mean().item()
        return loss.detach(), gn, kl, frac
    ex = explain(ppo, EAGER)
    for i in range(3):
        a = (torch.randn(8, 4), torch.randint(0, 3, (8,)), torch.randn(8) * 0.1 - 1.1, torch.randn(8))
        want = ppo(*a)
        grads = [p.grad.clone() for p in pi.parameters()]
        out = ex(*a)
        got = ex.captured(*a)
        assert all(torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(pi.parameters(), grads)), i
        assert torch.allclose(got[0], want[0]) and torch.allclose(got[1], want[1], atol=1e-6), i
        assert got[2] == pytest.approx(want[2], rel=1e-5, abs=1e-7) and got[3] == want[3], i
    out = ex.captured.explain()
    assert out.graph_count == 2 and out.break_count == 1 and out.variants == 1, out
