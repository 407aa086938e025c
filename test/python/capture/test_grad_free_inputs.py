"""graph_prep._grad_free_inputs (8480d5e) hands inputs that require grad but reach no output
to the compiled graph detached.  An input written in place under no_grad (a parameter's
update, weight clipping) is read on through the write's result, which that analysis does not
follow: such a parameter was detached, so the graph's later ops lost its gradient (the
output of `fc(x)` after a weight clip did not require grad: a wrong result) and its `.grad`
(None: an optimizer step written by hand raised TypeError).  Compared with eager, outputs,
parameters and gradients."""
import torch

from harness import run_program

X = [torch.randn(2, 4) for _ in range(4)]


def test_weight_clipping_under_no_grad_keeps_the_gradient():
    """bench/modules.py param_mutation_no_grad (WGAN weight clipping): the output requires
    grad as in eager."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        with torch.no_grad():
            self.fc.weight.clamp_(-0.3, 0.3)
            self.fc.bias.zero_()
        return self.fc(x)
def make():
    return M()
""", [(x,) for x in X])


def test_hand_written_step_reads_grad_after_an_in_place_decay():
    """bench/modules7.py lion_sign_update_lerp: under no_grad, `p.mul_(...)` then `p.grad`
    read: the parameter's gradient, not None."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.exp_avg = [torch.zeros_like(p) for p in self.net.parameters()]
    def forward(self, x):
        self.net.zero_grad(set_to_none=True)
        loss = self.net(x).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p, m in zip(self.net.parameters(), self.exp_avg):
                p.mul_(1 - 1e-4)
                upd = m.lerp(p.grad, 0.1).sign_()
                p.add_(upd, alpha=-1e-3)
                m.lerp_(p.grad, 0.01)
        return loss.detach()
def make():
    return M()
def state(m):
    return [p.detach().clone() for p in m.parameters()] + [t.clone() for t in m.exp_avg]
""", [(x,) for x in X])
