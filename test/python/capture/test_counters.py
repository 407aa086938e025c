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


def test_counter_reaching_the_graph_is_a_graph_input():
    """`x * self.step` after `self.step += 1`: the counter is an int graph input (0-d int64)."""
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
""", [(X,)] * 6, recompiles=0, graphs=1)


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
""", [(X,)] * 4, recompiles=1)   # (by value once, then followed: the int returned is its expression, test_capture22)


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


def test_layerdrop_python_random_guards_the_decision_not_the_number():
    """`rng.random() < self.p` skips a layer: the number is drawn eagerly between graphs and
    the guard after it is the comparison's outcome, so every call replays one of the (at most
    four) recorded paths instead of recording a new one per drawn number."""
    c = run_program("""
import random
RNG = random.Random(0)
class LayerDrop(nn.Module):
    def __init__(self, n=2, p=0.4):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
        self.p = p
    def forward(self, x):
        for layer in self.layers:
            if self.training and RNG.random() < self.p:
                continue
            x = x + torch.relu(layer(x))
        return x
def make():
    return LayerDrop()
def state(m):
    return RNG.getstate()
""", [(X,)] * 16)
    assert c.recompiles <= 3 and c.stats.replays >= 12, (c.recompiles, c.stats.replays)


def test_random_numbers_compared_on_either_side():
    c = run_program("""
import random
RNG = random.Random(1)
def make():
    def f(x, k):
        if k * 0.5 > RNG.random() * 2:
            x = x * 2
        if RNG.random() - 0.5 <= 0:
            x = x - 1
        if RNG.random() * 4 // 1 == 2:
            x = x + 3
        return x
    return f
def state(f):
    return RNG.getstate()
""", [(X, 1)] * 14 + [(X, 3)] * 4, cache_limit=20)
    assert c.recompiles <= 7 and c.stats.replays >= 6, (c.recompiles, c.stats.replays)
    guards = [g.describe() for v in c.variants for p in [None] for g in v.pre] + \
        [p.guard.describe() for v in c.variants for p in getattr(v, "mid_guards", [])]
    assert any("<result of break 0> * 2)" in g for g in guards), guards


def test_random_number_reaching_the_graph_is_an_input():
    """x * RNG.random(): the number is an input of the graph (a 0-d tensor), not a constant
    guarded by value (which recompiled on every call): no recompile, values equal eager's."""
    c = run_program("""
import random
RNG = random.Random(2)
def make():
    def f(x):
        return x * RNG.random()
    return f
def state(f):
    return RNG.getstate()
""", [(X,)] * 4, cache_limit=20)
    assert c.recompiles == 0


def test_random_number_the_graph_cannot_take_is_guarded_by_value():
    """An integer tensor times a float is float32 (the default dtype), times a 0-d float64
    tensor float64: the number stays a constant of the graph, guarded by value."""
    c = run_program("""
import random
RNG = random.Random(2)
def make():
    def f(x):
        return x.long() * RNG.random()
    return f
def state(f):
    return RNG.getstate()
""", [(X,)] * 4, cache_limit=20)
    assert c.recompiles == 3


def test_item_compared_and_branched_on():
    """`if y.sum().item() > th:` / `if float(y.mean()) < 0:`: data-dependent breaks whose guards
    are the branches taken, not the numbers (at most four variants for any inputs)."""
    xs = [torch.randn(4) for _ in range(12)]
    c = run_program("""
def make():
    def f(x, th):
        y = x.sin()
        if y.sum().item() > th:
            y = y * 2
        if float(y.mean()) < 0:
            y = y - 1
        return y
    return f
""", [(x, 0.1) for x in xs], cache_limit=20)
    assert c.recompiles <= 3 and c.stats.replays >= 8, (c.recompiles, c.stats.replays)


def test_counter_read_back_into_a_warmup_factor_is_a_graph_input():
    """`self.step += 1; w = min(1.0, self.step / self.warmup)`: the counter read back after
    its store is followed as `(step before the call + 1)`; the float computed from it is a
    graph input, so the warmup does not recompile on every call; past the warmup, `min`
    returns 1.0 as computed by the replay.  So is the int itself where a tensor operator
    takes it (`x * self.step`: a 0-d int64 input, as torch wraps a Python int).  Its uses
    flows.py does not follow (a list, a torch function's argument) still guard its value."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.step, self.warmup = 0, 4
    def forward(self, x):
        self.step += 1
        w = min(1.0, self.step / self.warmup)
        self.last_w = w * 1.0
        return self.lin(x) * w
def make():
    return M()
""", [(X,)] * 8, recompiles=0, graphs=1)
    for use, n in (("x * self.step", 0), ("x.long() * self.step - self.step", 0), ("x + [self.step][0]", 2),
                   ("torch.full_like(x, self.step)", 2)):
        run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
    def forward(self, x):
        self.step += 1
        return USE
def make():
    return M()
""".replace("USE", use), [(X,)] * 3, recompiles=n)


def test_int_from_item_in_tensor_arithmetic_is_an_input():
    """An int a graph break returns (`x.argmax().item()`) and a tensor operator takes right
    away: a 0-d int64 graph input, so float, int64, uint8 (wrapping) and bool tensors get the
    dtype and values a Python int gives them; a new value is no recompile, also kept in a
    local variable first (flow_roots.op_store_fast drops the variable's following at any
    other store, so an equal small int stored there is not taken for it)."""
    torch.manual_seed(0)
    calls = [(torch.randn(6) * 50,) for _ in range(5)]
    run_program("""
def make():
    def f(x):
        return (x * x.argmax().item(), x.long() * (x.argmin().item() - 3),
                x.abs().to(torch.uint8) * (x.argmax().item() + 250), (x > 0) * x.argmax().item())
    return f
""", calls, recompiles=0)
    run_program("""
def make():
    def f(x):
        n = x.argmax().item()
        return x * n
    return f
""", calls, recompiles=0)


def test_int_in_a_local_rebound_or_needed_by_value_is_guarded():
    """`n = t.argmax().item()` followed through variables; a variable rebound to a constant
    (equal to a recorded value or not: `n = 2`, `for k in ...: n = k`) is that constant, the
    number it held guarded by value where nothing took it as an input (a recompile per
    value); copied first (`m = n`), the copy is still an input."""
    torch.manual_seed(0)
    calls = [(torch.randn(6) * 50,) for _ in range(5)]
    distinct = len({int(c[0].argmax()) for c in calls})
    first = int(calls[0][0].argmax())   # rebound to the very int object the recording's item was
    for body, recompiles in (
            (f"n = x.argmax().item()\n        n = {first}\n        return x * n", distinct - 1),
            ("n = x.argmax().item()\n        m = n\n        n = 2\n        return x * m + n", 0),
            ("n = x.argmax().item()\n        for k in range(3):\n            n = k\n        return x * n", distinct - 1),
            (f"n = x.argmax().item()\n        del n\n        n = {first}\n        return x * n", distinct - 1),
            ("n = x.argmax().item()\n        return x[:n] * n", distinct - 1)):
        run_program(f"""
def make():
    def f(x):
        {body}
    return f
""", calls, recompiles=recompiles)
