"""Capture gaps of training code (issue 11): `t.data = v` writes (momentum encoders, EMA
teachers, weight clipping) broke the graph at each write (data_writes.py); an optimizer's
step / zero_grad made every guard after it need a continuation, which a function that
writes a counter before the step has none of, so gradient accumulation ran eagerly
(optim_calls._optimizer_owning_call, replay._hoist_start_state).  Each program runs eagerly and
captured on its own copy of the state, compared after every call (harness.run_program)."""
import torch

from harness import run_program

_MOMENTUM_ENCODER = """
import copy
class MoCoLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc_q = nn.Linear(6, 5)
        self.enc_k = copy.deepcopy(self.enc_q)
        for p in self.enc_k.parameters():
            p.requires_grad = False
        self.m = 0.9
    def forward(self, xq, xk):
        q = F.normalize(self.enc_q(xq), dim=1)
        with torch.no_grad():
            for pq, pk in zip(self.enc_q.parameters(), self.enc_k.parameters()):
                pk.data = pk.data * self.m + pq.data * (1.0 - self.m)
            k = F.normalize(self.enc_k(xk), dim=1)
        loss = -(q * k).sum(1).mean()
        loss.backward()
        with torch.no_grad():
            for p in self.enc_q.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        return loss.detach(), k
def make():
    return MoCoLike()
def mutate(i, m):
    if i == 3:
        m.m = 0.5              # the momentum changes between calls
    if i == 4:
        with torch.no_grad():  # the key encoder's weights replaced from outside
            m.enc_k.weight.data = m.enc_k.weight.data.flip(0).contiguous()
"""


def test_momentum_encoder_data_writes_stay_in_one_graph():
    """`pk.data = pk.data * m + pq.data * (1 - m)` then the key encoder's forward: each write
    broke the graph (2 per call); the key encoder now reads the values written, the writes run
    after the graph.  Outputs, both encoders' weights and gradients match eager over 6 calls,
    also after the momentum and the key weights change between calls."""
    torch.manual_seed(0)
    calls = [(torch.randn(4, 6), torch.randn(4, 6)) for _ in range(6)]
    c = run_program(_MOMENTUM_ENCODER, calls, breaks=1)
    assert all("data" not in r for v in c.variants for r, *_ in v.breaks), [v.breaks for v in c.variants]


_WEIGHT_CLIP = """
class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1))
        self.clip = 0.05
    def forward(self, real, fake):
        for p in self.net.parameters():
            p.data = p.data.clamp(-self.clip, self.clip)   # WGAN weight clipping
        return self.net(real).mean() - self.net(fake).mean()
def make():
    return Critic()
def mutate(i, m):
    if i == 2:
        m.clip = 0.2
"""


def test_data_write_to_a_parameter_that_requires_grad_runs_before_its_next_use():
    """Parameters that require grad: their use after the write must reach the parameter in
    autograd.  Session 17: the first use ended the graph and the writes ran before it (one
    break, not one per parameter); since session 26 (data_writes._SWAP_READERS) the linear
    layers read `data_as(p, v)` (v's values, p's gradient): one graph, no break. Outputs (and
    their grad_fn's gradients) and weights match eager."""
    torch.manual_seed(0)
    calls = [(torch.randn(3, 5), torch.randn(3, 5)) for _ in range(4)]
    run_program(_WEIGHT_CLIP, calls, graphs=1, breaks=0)


_EMA_BRANCH = """
class EMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(4))
    def forward(self, x):
        self.avg.data = self.avg.data * 0.5 + x.mean(0) * 0.5
        if x.sum() > 0:          # checked after the graph: a call taking the other side misses
            return self.avg * 2
        return self.avg - 1
def make():
    return EMA()
"""


def test_data_write_undone_when_a_replay_misses_after_it():
    """A replay that misses after the write (the branch's check after the graph) records the
    call again from its start: the buffer's storage and values are put back first, so the
    average is updated once per call, as in eager."""
    torch.manual_seed(0)
    xs = [torch.randn(3, 4).abs() for _ in range(2)] + [-torch.randn(3, 4).abs()] + \
        [torch.randn(3, 4).abs() for _ in range(2)]
    c = run_program(_EMA_BRANCH, [(x,) for x in xs])
    assert c.graph_count >= 1 and c.stats.replays >= 1


_GRAD_ACCUM = """
class Accum:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.st = {"micro": 0, "updates": 0}
    def __call__(self, x, y):
        loss = F.mse_loss(self.model(x).squeeze(-1), y) / 2
        loss.backward()
        self.st["micro"] += 1
        if self.st["micro"] % 2 == 0:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.st["updates"] += 1
        return loss.detach(), self.model(x).detach()
def make():
    return Accum()
def state(a):
    return dict(a.model.state_dict()), [p.grad for p in a.model.parameters()], a.opt.state_dict()["state"], dict(a.st)
"""


def test_gradient_accumulation_with_a_dict_counter_is_captured():
    """`opt.step()` every second call, decided by a dict counter incremented before it, and the
    model read again after it: the guards after the step (the optimizer's methods looked up, the
    modules read again) needed a continuation, which the counter's write left none of, and the
    function ran eagerly.  The step and zero_grad write only the optimizer's state and tensors:
    those guards are checked before the step.  Recorded until the counters are followed
    (a dict's int guarded by value until two values were read there), then replayed."""
    torch.manual_seed(0)
    calls = [(torch.randn(4, 6), torch.randn(4)) for _ in range(10)]
    c = run_program(_GRAD_ACCUM, calls)
    assert c.recompiles <= 4 and c.stats.replays >= 5, (c.recompiles, c.stats.replays, c.stats.recompile_reasons)


_GROUP_LR = """
class Sched:
    def __init__(self):
        self.model = nn.Linear(4, 2)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
    def __call__(self, x, y, scale):
        for g in self.opt.param_groups:
            g["lr"] = 0.1 * scale              # written before the step, which reads it
        self.opt.zero_grad()
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach(), [g["lr"] for g in self.opt.param_groups]
def make():
    return Sched()
def mutate(i, s):
    for g in s.opt.param_groups:
        g["lr"] = 0.1                        # the same value at every call's start
def state(s):
    return dict(s.model.state_dict()), s.opt.state_dict()["state"]
"""


def test_param_group_written_before_the_step_is_not_replayed_stale():
    """The replay applied the function's writes at its end; the step reads the lr written before
    it: with the guards after the step checked before it, a replay's step read the old lr (wrong
    parameters). Such a write ran the function eagerly; since flush_writes (54c5750, fd35f1a) it
    is made right before the step's eager call, with the lr computed from this call's scale:
    outputs and parameters match eager's (run_program) while the scale changes, and no variant
    runs eagerly."""
    torch.manual_seed(0)
    calls = [(torch.randn(3, 4), torch.randn(3, 2), s) for s in (0.5, 0.5, 2.0, 1.0, 2.0)]
    c = run_program(_GROUP_LR, calls, allow_eager=True)
    assert c.variants and not any(v.eager for v in c.variants), [(v.eager, v.reason) for v in c.variants]


_STEP_HOOK = """
LOG = {"steps": 0}
def count(opt, args, kwargs):
    LOG["steps"] += 1
class Step:
    def __init__(self):
        self.model = nn.Linear(4, 2)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.opt.register_step_pre_hook(count)
    def __call__(self, x, y):
        self.opt.zero_grad()
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach() * LOG["steps"], self.model(x).detach()
def make():
    return Step()
def state(s):
    return dict(s.model.state_dict())
"""


def test_optimizer_step_with_a_hook_still_guards_what_it_may_write():
    """A step pre-hook runs the user's code, which writes a global the function reads after the
    step: the step is an uncapturable call that may write any state again (what is read after
    it is guarded after it), and the results match eager."""
    torch.manual_seed(0)
    calls = [(torch.randn(3, 4), torch.randn(3, 2)) for _ in range(4)]
    run_program(_STEP_HOOK, calls, allow_eager=True)


_STATE_READ = """
class Step:
    def __init__(self):
        self.model = nn.Linear(4, 2)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
    def __call__(self, x, y):
        self.opt.zero_grad()
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        buf = self.opt.state[self.model.weight]["momentum_buffer"]   # made by the first step
        return loss.detach(), buf.norm()
def make():
    return Step()
def state(s):
    return dict(s.model.state_dict()), s.opt.state_dict()["state"]
"""


def test_optimizer_state_read_after_its_step_matches_eager():
    """The optimizer's state, written by its step, read after it: no guard after the step
    would check it, so the function runs eagerly there; results match eager."""
    torch.manual_seed(0)
    calls = [(torch.randn(3, 4), torch.randn(3, 2)) for _ in range(4)]
    run_program(_STATE_READ, calls, allow_eager=True)
