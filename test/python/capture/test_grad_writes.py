"""`p.grad = None` / `p.grad = g` on a parameter between the ops of a step (a manual SGD
update that clears each gradient after using it, as research code writes it) broke the graph
at every assignment: bench/modules4.py weight_norm_param_manual_sgd was 8 graphs, 7 breaks
(Dynamo 2, 1), bench/capture6.py c6_manual_sgd_grad_set_to_none_in_loop 6 graphs, 5 breaks.
The write is now a step run right after the open graph (graph_steps._grad_write); a later read of
that `.grad` (by the function, by library code such as clip_grad_norm_, or by an uncapturable
call such as an optimizer's step) ends the graph first, so it sees the write as eager does.
Each program is compared with eager (outputs, parameters, every `.grad`) over several calls."""
import torch

from harness import run_program

MANUAL_SGD = """
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 8), nn.Linear(8, 2)
    def forward(self, x, y):
        loss = F.mse_loss(self.b(torch.tanh(self.a(x))), y)
        loss.backward()
        with torch.no_grad():
            for p in self.parameters():
                p.add_(p.grad, alpha=-0.1)
                p.grad = None
        return loss.detach(), self.b.weight.clone()
def make():
    return Step()
def state(m):
    return [p.grad for p in m.parameters()]
"""


def _calls(n=4):
    return [(torch.randn(6, 5), torch.randn(6, 2)) for _ in range(n)]


def test_grad_cleared_in_update_loop_keeps_one_update_graph():
    # the forward (one graph), the backward (the one break), the whole update (one graph)
    run_program(MANUAL_SGD, _calls(), graphs=2, breaks=1, recompiles=0)


READ_AFTER_WRITE = """
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 2)
    def forward(self, x, y):
        loss = F.mse_loss(self.a(x), y)
        loss.backward()
        with torch.no_grad():
            w = self.a.weight
            g = w.grad * 0.5
            w.grad = g.clone()               # set to a graph value
            scaled = w.grad * 2              # read back in the same graph: after the write
            self.a.bias.grad = None
            none_now = self.a.bias.grad is None
            total = NORM(self.parameters(), 1.0)   # library code reading every .grad
        return scaled, none_now, total
def make():
    return Step()
def state(m):
    return [p.grad for p in m.parameters()]
"""


def test_grad_read_after_write_sees_the_write_and_counts_the_split():
    """The graph ends at `w.grad * 2` (a read of the .grad it writes): a split, counted as a
    graph break."""
    src = READ_AFTER_WRITE.replace("NORM(self.parameters(), 1.0)", "nn.utils.clip_grad_norm_(self.parameters(), 1.0)")
    c = run_program(src, _calls(3), name="split")
    assert any("a read of a .grad the open graph's step writes" in r for v in c.variants for r, _ in v.breaks)


def test_grad_read_after_write_sees_the_write():
    for norm in ("nn.utils.clip_grad_norm_", "nn.utils.get_total_norm"):
        src = READ_AFTER_WRITE.replace("NORM(self.parameters(), 1.0)", f"{norm}([p.grad for p in self.parameters() if p.grad is not None], 1.0)"
                                       if norm.endswith("get_total_norm") else f"{norm}(self.parameters(), 1.0)")
        run_program(src, _calls(), name=norm.rsplit(".", 1)[-1], recompiles=0)


GUARD_AFTER_WRITES = """
FLAG = [True]
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 2)
    def forward(self, x, y):
        loss = F.mse_loss(self.a(x), y)
        loss.backward()
        with torch.no_grad():
            for p in self.parameters():
                p.sub_(0.1 * p.grad)
                p.grad = torch.zeros_like(p) if FLAG[0] else None
        print("step", file=SINK)
        if FLAG[0]:                          # read after an uncapturable call: a mid-replay guard
            loss = loss * 2
        return loss.detach()
class Sink:
    def write(self, s):
        pass
    def flush(self):
        pass
SINK = Sink()
def make():
    return Step()
def state(m):
    return [p.grad for p in m.parameters()]
def mutate(i, m):
    FLAG[0] = i % 2 == 0
"""


def test_guard_failing_after_grad_writes_restores_the_grads():
    """A replay failing a guard after the writes rolls the .grad back (replay._save_grads)
    before the call records again: no gradient is lost or accumulated twice."""
    run_program(GUARD_AFTER_WRITES, _calls(6), name="guard_after")


LEADING_CLEAR = """
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 2)
        self.opt = torch.optim.SGD(self.a.parameters(), lr=0.1, momentum=0.9)
    def forward(self, x, y):
        for p in self.a.parameters():
            p.grad = None                    # before any graph operation
        loss = F.mse_loss(self.a(x), y)
        loss.backward()
        self.a.weight.grad = self.a.weight.grad.clamp(-0.1, 0.1)   # set between graphs' ops
        out = loss.detach()
        self.opt.step()                      # an uncapturable call reading every .grad
        return out
def make():
    return Step()
def state(m):
    return [p.grad for p in m.parameters()] + [m.opt.state_dict()["state"]]
"""


def test_grad_cleared_before_forward_and_set_before_optimizer_step():
    run_program(LEADING_CLEAR, _calls(5), name="leading", recompiles=0)
