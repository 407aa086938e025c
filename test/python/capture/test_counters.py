"""Integer counters on modules and objects (`self.step += 1`, `if self.step % 5 == 0`): no
guard on the value, so no variant per call; the replay writes the counter as an expression of
the value it finds, and a branch on it is guarded by the comparison's outcome.  Where the
value reaches anything else (a graph, a local variable, a call) it is guarded as before.
Outputs and module / global state against eager on every call (run_program)."""
import torch

from harness import run_program

X = torch.randn(2, 4)


def test_step_counter_with_periodic_branch():
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.step = 0
        self.hits = 0
    def forward(self, x):
        self.step += 1
        y = self.lin(x)
        if self.step % 5 == 0:
            self.hits = self.hits + 1
            y = y * 2
        return y
def make():
    return M()
""", [(X,)] * 23, graphs=2, recompiles=1, breaks=0)
    assert c.stats.records == 2


def test_counter_reset_and_decrement():
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 3
        self.budget = 100
    def forward(self, x):
        self.step = self.step + 2
        self.budget -= 3
        if self.step >= 10:
            self.step = 0
            return x.relu()
        return x.tanh()
def make():
    return M()
""", [(X,)] * 16, recompiles=1)


def test_counter_reaching_the_graph_is_guarded():
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
    def forward(self, x):
        self.step += 1
        return x * self.step
def make():
    return M()
""", [(X,)] * 6, recompiles=5, cache_limit=10)


def test_counter_through_a_local_is_guarded():
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
    def forward(self, x):
        s = self.step
        self.step = s + 1
        return x + 1, s
def make():
    return M()
""", [(X,)] * 4, recompiles=3)


def test_counter_changed_between_calls_by_the_program():
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
    def forward(self, x):
        self.step += 1
        if self.step > 4:
            return x.sin()
        return x.cos()
def make():
    return M()
def mutate(i, m):
    if i == 6:
        m.step = 0
    if i == 8:
        m.step = 2.5   # a float now: its type is guarded, and a float is guarded by value
""", [(X,)] * 10, recompiles=3)


def test_counter_on_a_global_object():
    run_program("""
class State:
    pass
STATE = State()
STATE.calls = 0
def make():
    def f(x):
        STATE.calls += 1
        if STATE.calls % 3 == 1:
            return x * 2
        return x - 1
    return f
def state(f):
    return STATE.calls
""", [(X,)] * 9, recompiles=1)
