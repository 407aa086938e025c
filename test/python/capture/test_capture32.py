"""Capture rate where capture gave up on a whole frame (issue 11 item 4), session 28.

torch.amp.GradScaler's `unscale_` / `step` / `update` / `get_scale` in a training step: recorded op by
op (untraced library code), `unscale_(opt)` read the optimizer's state that its `zero_grad` had
written and capture gave up on the whole function (bench/modules8.py
grad_scaler_cpu_inf_step_skipped, modules11.py optim_grad_scaler_cpu_bf16_autocast_unscale_clip).
They now run at replay as they are, between graphs, as an optimizer's step does
(optim_calls._grad_scaler_call).

Each test compares results, parameters, gradients, the optimizer's and the scaler's state with eager
after every call, with inputs changing between calls (an overflowing one skips the step)."""
import contextvars
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from harness import EAGER
from mlircap.capture import capture


class ScaledStep(nn.Module):
    def __init__(self, opt_cls, unscale, autocast):
        super().__init__()
        self.l1 = nn.Linear(4, 6)
        self.l2 = nn.Linear(6, 2)
        self.opt = opt_cls(self.parameters(), lr=0.05)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
        self.unscale = unscale
        self.autocast = autocast

    def forward(self, x, y):
        self.opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            out = self.l2(torch.relu(self.l1(x)))
        loss = F.mse_loss(out.float(), y)
        self.scaler.scale(loss).backward()
        if self.unscale:
            self.scaler.unscale_(self.opt)
            nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.detach(), self.scaler.get_scale()


def _eq(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.nan_to_num(), b.nan_to_num()) and \
        torch.equal(a.isnan(), b.isnan())


def _same_state(a, b, i):
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert _eq(p, q), (i, n)
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or _eq(p.grad, q.grad)), (i, n)
    sa, sb = a.opt.state_dict(), b.opt.state_dict()
    assert sa["param_groups"] == sb["param_groups"], i
    assert sa["state"].keys() == sb["state"].keys(), i
    for k in sa["state"]:
        for n, v in sa["state"][k].items():
            w = sb["state"][k][n]
            assert _eq(v, w) if isinstance(v, torch.Tensor) else v == w, (i, k, n)
    assert a.scaler.state_dict() == b.scaler.state_dict(), i


@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.Adam])
@pytest.mark.parametrize("unscale", [True, False])
@pytest.mark.parametrize("autocast", [False, True])
def test_grad_scaler_step_replayed_between_graphs(opt_cls, unscale, autocast):
    torch.manual_seed(0)
    ref = ScaledStep(opt_cls, unscale, autocast)
    m = copy.deepcopy(ref)
    c = capture(m, EAGER)
    for i in range(6):
        x = torch.randn(3, 4) * (1e38 if i == 3 else 1)   # call 3 overflows: its step is skipped
        y = torch.randn(3, 2)
        le, se = ref(x, y)
        with warnings.catch_warnings(record=True) as wl:
            warnings.simplefilter("always")
            lc, sc = c(x, y)
        assert not [w for w in wl if "capture gave up" in str(w.message)], [str(w.message) for w in wl]
        assert _eq(le, lc) and se == sc, (i, le, lc, se, sc)
        _same_state(ref, m, i)
    st = c._mlircap_capture.stats
    assert st.eager_calls == 0 and st.replays >= 3, vars(st)
    assert not any(v.eager for v in c._mlircap_capture.variants)


def _closure_step(model, opt, scaler):
    def step(x, y):
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        return loss.detach() * scaler.get_scale(), before
    return step


def test_grad_scaler_of_a_closure_with_the_scale_read_in_between():
    torch.manual_seed(1)
    me = nn.Linear(3, 2)
    mc = copy.deepcopy(me)
    oe, oc = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (me, mc))
    se, sc = (torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=1) for _ in range(2))
    fe = _closure_step(me, oe, se)
    c = capture(_closure_step(mc, oc, sc), EAGER)
    for i in range(6):
        x, y = torch.randn(4, 3) * (float("inf") if i in (2, 3) else 1), torch.randn(4, 2)
        re, be = fe(x, y)
        rc, bc = c(x, y)
        assert _eq(re, rc) and be == bc, (i, re, rc, be, bc)
        assert all(_eq(p, q) and _eq(p.grad, q.grad) for p, q in zip(me.parameters(), mc.parameters())), i
        assert se.state_dict() == sc.state_dict(), i
        assert all(_eq(oe.state[p]["momentum_buffer"], oc.state[q]["momentum_buffer"])
                   for p, q in zip(me.parameters(), mc.parameters()) if p in oe.state), i
    st = c._mlircap_capture.stats
    assert st.eager_calls == 0 and st.replays >= 3, vars(st)


# A ContextVar the function sets before calling a callee capture gave up in (learned: run eagerly
# between graphs at replay, give_ups.py): a replay sets the variable at its end, so the callee read
# the value from before the set (x * 1.0 where eager computes x * 2.0, from the third call on).
SCALE = contextvars.ContextVar("scale", default=1.0)


def _reads_scale(x):
    globals()   # (capture gives up here: a callee learned, run eagerly between graphs)
    return x * SCALE.get()


def _sets_then_calls(x):
    tok = SCALE.set(2.0)
    y = _reads_scale(x.sin())
    SCALE.reset(tok)
    return y + 1


def _sets_and_resets_before(x):
    tok = SCALE.set(3.0)
    h = x.cos() * SCALE.get()
    SCALE.reset(tok)
    return _reads_scale(h) + 1


@pytest.mark.parametrize("fn", [_sets_then_calls, _sets_and_resets_before])
def test_context_var_set_before_a_learned_callee(fn):
    c = capture(fn, EAGER)
    for i in range(5):
        x = torch.randn(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rc = c(x)
        assert SCALE.get() == 1.0, i
        assert _eq(fn(x), rc), i
    st = c._mlircap_capture.stats
    if fn is _sets_and_resets_before:   # (back to its value before the callee: compiled around it)
        assert st.replays >= 2, vars(st)


# torch.compiler.is_compiling() is answered True in traced code (as under torch.compile); where the
# path that answer selects is one capture gives up on (transformers' Mamba scan handed to torch's
# associative_scan: bench/modules12.py hf_jamba_mamba_attention_moe_slow_path ran eagerly), the next
# recording answers False (eager's answer) in the frame that asked (give_ups.compiling_answer).
def _scan(x):
    w = 0.5 ** torch.arange(x.shape[0], dtype=x.dtype)
    if torch.compiler.is_compiling():
        globals()   # (a path capture gives up on, computing what eager's loop computes)
        return torch.stack([(x[:i + 1] * w[:i + 1].flip(0)[:, None]).sum(0) for i in range(x.shape[0])])
    out = [x[0]]
    for i in range(1, x.shape[0]):
        out.append(out[-1] * w[1] + x[i])
    return torch.stack(out)


class ScanNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen += x.shape[0]
        return _scan(self.proj(x)).tanh()


def test_is_compiling_answered_as_eager_where_its_path_gave_up():
    torch.manual_seed(0)
    ref = ScanNet()
    m = copy.deepcopy(ref)
    c = capture(m, EAGER)
    for i in range(5):
        x = torch.randn(5, 4)
        with warnings.catch_warnings(record=True) as wl:
            warnings.simplefilter("always")
            rc = c(x)
        assert not [w for w in wl if "capture gave up" in str(w.message)], [str(w.message) for w in wl]
        assert torch.allclose(ref(x), rc, atol=1e-6), i
        assert _eq(ref.seen, m.seen), i
    cap = c._mlircap_capture
    assert cap.stats.eager_calls == 0 and cap.stats.replays >= 3, vars(cap.stats)
    assert [k.co_name for k in cap.eager_compiling_codes] == ["_scan"] and not cap.break_codes


def _gives_up(x):
    globals()
    return x * 2


def _asks_then_calls(x):
    if torch.compiler.is_compiling():
        x = x + 0.0
    return _gives_up(x.sin()) + 1


def test_is_compiling_keeps_its_answer_where_a_callee_gave_up():
    # the frame that asked is not where capture gave up (a traced callee of it): the callee is
    # broken around as before, the answer stays True
    c = capture(_asks_then_calls, EAGER)
    for i in range(4):
        x = torch.randn(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _eq(c(x), _asks_then_calls(x)), i
    cap = c._mlircap_capture
    assert not cap.__dict__.get("eager_compiling_codes")
    assert [k.co_name for k in cap.break_codes] == ["_gives_up"] and cap.stats.replays >= 2, vars(cap.stats)


# `load[e] += 1` with `e` a 0-dim integer tensor (a loop over the experts a router picked): torch
# indexes with it as with an int, so the value written back is the very view read (overlaps.
# _basic_index_view); capture gave up on the function ('wrote in place to a tensor whose
# elements share memory').
class ExpertLoad(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(5, 4)
        self.register_buffer("load", torch.zeros(4))
        self.register_buffer("grid", torch.zeros(4, 3))

    def forward(self, x):
        idx = self.router(x).topk(2, -1).indices
        for e in idx.reshape(-1):
            self.load[e] += 1
            self.grid[e, 1:] -= 0.5
        return self.load / self.load.sum(), self.grid.clone()


def test_indexed_in_place_update_by_a_zero_dim_tensor():
    torch.manual_seed(0)
    ref = ExpertLoad()
    m = copy.deepcopy(ref)
    c = capture(m, EAGER)
    for i in range(5):
        x = torch.randn(3, 5)
        with warnings.catch_warnings(record=True) as wl:
            warnings.simplefilter("always")
            rc = c(x)
        assert not [w for w in wl if "capture gave up" in str(w.message)], [str(w.message) for w in wl]
        re = ref(x)
        assert all(_eq(a, b) for a, b in zip(re, rc)), i
        assert _eq(ref.load, m.load) and _eq(ref.grid, m.grid), i
    st = c._mlircap_capture.stats
    assert st.eager_calls == 0 and st.replays >= 3, vars(st)
