"""torch.optim optimizers stepped inside the captured function (test-time adaptation as TENT
does, meta-learning inner loops, a training step wrapped whole).  opt.step() ran untraced with
its ops recorded into the graph: the momentum buffers it creates on the first step went into
its state dict unseen, and the next call's recording read them as tensors of unknown origin
and gave up; opt.zero_grad() wrote .grad where the tracer does not look.  step / zero_grad now
run at replay as they are, once per call, like any uncapturable call."""
import copy

import pytest
import torch
import torch.nn as nn

from harness import EAGER, run_program, same
from mlircap.capture import capture


class Tent(nn.Module):
    """Entropy minimization on the norm layer's affine parameters at test time."""
    def __init__(self, opt):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 3))
        self.opt = opt(self.model[1].parameters())

    def forward(self, x):
        out = self.model(x)
        loss = -(out.softmax(1) * out.log_softmax(1)).sum(1).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return out


class TrainStep(nn.Module):
    """A whole training step in forward: zero_grad first, backward, step; the loss returned."""
    def __init__(self, opt):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        self.opt = opt(self.net.parameters())

    def forward(self, x):
        self.opt.zero_grad()
        loss = self.net(x).square().mean()
        loss.backward()
        self.opt.step()
        return loss.detach()


OPTS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True),
}


@pytest.mark.parametrize("opt", sorted(OPTS))
@pytest.mark.parametrize("cls", [Tent, TrainStep])
def test_optimizer_step_in_forward_matches_eager(cls, opt):
    torch.manual_seed(0)
    ref = cls(OPTS[opt])
    m = copy.deepcopy(ref)
    m.opt = OPTS[opt](m.model[1].parameters() if cls is Tent else m.net.parameters())
    fast = capture(m, EAGER)
    for i in range(5):
        x = torch.randn(4, 8)
        same(fast(x), ref(x), f"call {i}")
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p, q, f"call {i} parameter {n}")
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert c.stats.replays >= 3, (c.stats.replays, c.stats.recompile_reasons)


def test_step_function_taking_model_and_optimizer():
    """A train-step function (model, opt, x, y): the optimizer's parameters are held objects
    of the frame (bound right before the first uncapturable call, sources._bind_held), and the
    .grad snapshot the replay takes as it starts (replay._save_grads) named them before they
    were bound (UnboundLocalError '_r11' on the first replay)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    m2 = copy.deepcopy(m)
    opt, opt2 = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(m2.parameters(), lr=0.1)

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fast = capture(step, EAGER)
    for i in range(4):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        same(fast(m, opt, x, y), step(m2, opt2, x, y), f"call {i}")
        for (n, p), (_, q) in zip(m.named_parameters(), m2.named_parameters()):
            same(p, q, f"call {i} parameter {n}")
    assert fast._mlircap_capture.stats.replays == 3


_ZERO_GRAD_STEP = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 7)
        self.b = nn.Linear(7, 3)
    def forward(self, x):
        return self.b(self.a(x).tanh())
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Net()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.t = 0
    def forward(self, x, y):
        ZERO(self)
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        self.t += 1
        with torch.no_grad():
            for p in self.net.parameters():
                p.sub_(p.grad * (0.1 / self.t))   # the step count: a guard after the backward
        return loss.detach(), [p.grad for p in self.net.parameters()]
def make():
    return Step()
"""


@pytest.mark.parametrize("zero", ["self.net.zero_grad()", "self.net.zero_grad(set_to_none=False)",
                                  "self.opt.zero_grad()", "self.zero_grad()"])
def test_zero_grad_then_backward_with_a_guard_failing_after_it(zero):
    """module.zero_grad() (nn.Module's, untraced library code walking the parameters) made capture
    give up on the whole function ('tensor of unknown origin'); it runs at replay like
    opt.zero_grad().  A replay whose guard after the backward fails restores the .grad and records
    the call again from its start: zero_grad was logged as run once and not run again, so that
    backward accumulated into the previous call's gradients (a wrong result, opt.zero_grad() too)."""
    torch.manual_seed(0)
    calls = [(torch.randn(4, 5), torch.randn(4, 3)) for _ in range(4)]
    run_program(_ZERO_GRAD_STEP.replace("ZERO(self)", zero), calls)


def test_module_requires_grad_toggled_inside_forward():
    """module.requires_grad_(flag) in forward (layer freezing on a schedule): nn.Module's untraced
    walk over the parameters made capture give up ('tensor of unknown origin'); it runs at replay
    as it is, and the calls that follow see the flags it set."""
    src = """
class Freeze(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        self.calls = 0
    def forward(self, x):
        freeze = self.calls % 2 == 0
        self.calls += 1
        self.enc.requires_grad_(not freeze)
        self.zero_grad()
        loss = self.head(torch.relu(self.enc(x))).pow(2).mean()
        loss.backward()
        return loss.detach(), self.enc.weight.grad, self.head.weight.grad, self.enc.bias.requires_grad
def make():
    return Freeze()
"""
    torch.manual_seed(0)
    run_program(src, [(torch.randn(3, 4),) for _ in range(5)])
