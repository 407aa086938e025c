"""A guard placed after an optimizer's step inside the captured function, where no
continuation from that point exists (a number read in a comprehension frame, after a write
to external state): a replay failing it recorded the call again from its start, so the
forward read the parameters the replay's step had already updated and the step itself was
not run again (its result logged as run once).  Found by bench/capture6.py: the loss dict's
`{k: v.item() ...}` after `opt.step()` and a loop of `opt.step(); losses.append(loss.item())`
returned other losses and parameters than eager from the second call on.  A recording whose
uncapturable call wrote in place tensors the function read before it, with such a guard after
it, now runs eagerly for these arguments (the modules it calls captured on their own)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from harness import EAGER, same
from mlircap.capture import capture


class LossDictStep(nn.Module):
    def __init__(self, momentum):
        super().__init__()
        self.net = nn.Linear(6, 5)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=momentum)

    def forward(self, x, box, cls):
        out = self.net(x)
        losses = {"box": F.smooth_l1_loss(out[:, :4], box), "cls": F.binary_cross_entropy_with_logits(out[:, 4], cls)}
        total = sum(losses.values())
        self.opt.zero_grad(set_to_none=False)
        total.backward()
        self.opt.step()
        return total.detach(), {k: v.item() for k, v in losses.items()}


class InnerLoop(nn.Module):
    def __init__(self, momentum):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=momentum)

    def forward(self, x, y):
        losses = []
        for _ in range(2):
            self.opt.zero_grad()
            loss = F.cross_entropy(self.net(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
            self.opt.step()
            losses.append(loss.item())
        return torch.tensor(losses), self.net(x).detach()


def _inputs(cls):
    if cls is LossDictStep:
        return torch.randn(6, 6), torch.randn(6, 4), torch.rand(6)
    return torch.randn(8, 6), torch.randint(0, 3, (8,))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("cls", [LossDictStep, InnerLoop])
def test_guard_after_optimizer_step_without_continuation_matches_eager(cls, momentum):
    torch.manual_seed(0)
    ref = cls(momentum)
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(5):
        args = _inputs(cls)
        same(fast(*args), ref(*args), f"call {i}")
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p, q, f"call {i} parameter {n}")
    c = fast._mlircap_capture
    # InnerLoop: the loop has continuations there since test_capture20 (its range iterator, backward's
    # break); LossDictStep: its `{k: v.item() ...}` returned at once is no guard after the step since
    # test_capture23 (it ran eagerly): both captured, replayed, and the same as eager above
    assert not any(v.eager for v in c.variants) and c.stats.replays >= 3, [v.reason for v in c.variants]


def test_optimizer_step_with_guards_it_cannot_fail_stays_captured():
    """The same step returning the loss as a tensor (no guard after the step): replayed, not eager."""
    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(6, 2)
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)

        def forward(self, x, y):
            self.opt.zero_grad()
            loss = F.mse_loss(self.net(x), y)
            loss.backward()
            self.opt.step()
            return loss.detach()

    torch.manual_seed(0)
    ref = Step()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(4):
        x, y = torch.randn(5, 6), torch.randn(5, 2)
        same(fast(x, y), ref(x, y), f"call {i}")
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p, q, f"call {i} parameter {n}")
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert c.stats.replays == 3


_DROPPED_RESULT = """
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 2)
        self.opt = torch.optim.SGD(self.a.parameters(), lr=0.1, momentum=0.9)
        self.calls = 0
    def forward(self, x, y):
        self.calls += 1                      # a write to external state: no continuation after it
        self.opt.zero_grad()
        loss = F.mse_loss(self.a(x), y)
        loss.backward()
        out = loss.detach()
        self.opt.step()                      # its result (None) dropped unread
        return out
def make():
    return Step()
def state(m):
    return [p.grad for p in m.parameters()] + [m.opt.state_dict()["state"]]
"""


def test_dropped_result_of_optimizer_step_is_not_guarded():
    """`opt.step()` as a statement: its result was guarded (`b4 is None`), a guard after the
    step with no continuation, so the function ran eagerly; a result the next instruction
    pops is neither sourced nor guarded (external_calls._popped)."""
    from harness import run_program
    calls = [(torch.randn(6, 5), torch.randn(6, 2)) for _ in range(5)]
    run_program(_DROPPED_RESULT, calls, name="dropped", recompiles=0)


class DropoutStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Dropout(0.3), nn.Linear(8, 3))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)

    def forward(self, x, y):
        self.net.train()
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.opt.param_groups[0]["lr"] < 0.02:   # a guard after the step: fails at call 3
            loss = loss * 0.5 + torch.rand(())
        return loss.detach()


def test_random_draws_before_optimizer_step_keep_the_continuation():
    """A training step with dropout (random draws before the step): a guard after the step
    had no continuation (a recording that draws random numbers restored the generator and
    recorded again on a miss, which is no option after a step), so every such train step ran
    eagerly. The continuation is right there: the replay drew what eager draws, and the rest
    of the frame runs from the break with the generator where eager's is."""
    torch.manual_seed(0)
    ref = DropoutStep()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(5):
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        if i == 3:
            for mod in (ref, m):
                mod.opt.param_groups[0]["lr"] = 0.01
        torch.manual_seed(10 + i)
        want = ref(x, y)
        state = torch.get_rng_state()
        torch.manual_seed(10 + i)
        same(fast(x, y), want, f"call {i}")
        assert torch.equal(torch.get_rng_state(), state), f"call {i}: generator state"
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p, q, f"call {i} parameter {n}")
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
