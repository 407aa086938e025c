"""Int counters held in dicts (`self.stats["calls"] += 1`, a module-level dict of counters,
`d.get("tokens", 0) + n`, `d.setdefault("calls", 0)`): an item of a lazily guarded plain
dict read with a key it has is followed like a list item (flow_roots._flow_item), and an
int the call stores into such a dict over another value marks that item as varying
(side_effects._int_item_stored), so the next recording follows it instead of guarding its
value: the write is replayed as the expression of the item's value at the replay.  Before,
every call recompiled (`self.stats['calls'] == 1`, `== 2`, ...) until cache_limit.  Every
call is compared with eager: outputs, module state, globals."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(8)]


def test_module_stats_dict_counters_stop_recompiling():
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.stats = {}
    def forward(self, x):
        self.stats.setdefault("calls", 0)
        self.stats["calls"] += 1
        self.stats["tokens"] = self.stats.get("tokens", 0) + x.shape[0] * x.shape[1]
        return self.fc(x)
def make():
    return M()
""", [(x,) for x in X], breaks=0)
    assert len(c.variants) == 2, c.stats.recompile_reasons   # (the empty dict, then the counters)
    assert c.variants[-1].hits == len(X) - 2


def test_global_dict_counter_read_back_into_a_factor():
    """A global dict counter, read back after the increment into a warmup factor (a graph
    input), and a branch on it every 3 calls (a guard on the branch, not the value)."""
    run_program("""
STATS = {"n": 0, "name": "m"}
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        STATS["n"] += 1
        y = self.fc(x) * min(1.0, STATS["n"] / 4)
        if STATS["n"] % 3 == 0:
            y = y + 1
        return y
def make():
    return M()
""", [(x,) for x in X], breaks=0)


def test_dict_counter_changed_by_the_program_between_calls():
    """The program resets, deletes and re-adds the counter and adds keys between calls:
    the keys are guarded, the value is not, every call agrees with eager."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.stats = {"calls": 0}
    def forward(self, x):
        self.stats["calls"] += 1
        return self.fc(x) + self.stats.get("bias", 0.0)
def make():
    return M()
def mutate(i, m):
    if i == 3:
        m.stats["calls"] = 100
    if i == 4:
        m.stats["bias"] = 2.0
    if i == 5:
        del m.stats["bias"]
    if i == 6:
        m.stats = {"calls": -5}
""", [(x,) for x in X], breaks=0)
    assert c.recompiles <= 4, c.stats.recompile_reasons


def test_dict_item_written_with_a_constant_then_read():
    """`d["k"] = 0` then `d["k"]` read back: the constant the call stored, not the item's
    value at the call (a stored key is not followed as the pre-call item)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.state = {"k": 3, "n": 1}
    def forward(self, x):
        self.state["n"] += 1
        if self.state["n"] > 4:
            self.state["k"] = 0
        return self.fc(x) * (self.state["k"] + self.state.get("n"))
def make():
    return M()
""", [(x,) for x in X], breaks=0)


def test_dict_mutated_by_a_method_then_read():
    """d.update(...) between an increment and a read: the read is the updated item."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.d = {"a": 1, "b": 2}
    def forward(self, x):
        self.d["a"] += 1
        if self.d["a"] % 2 == 0:
            self.d.update(b=self.d["b"] + 3)
        return self.fc(x) * self.d.get("b")
def make():
    return M()
""", [(x,) for x in X])


def test_counter_dict_beside_getattr_and_hasattr_of_the_module():
    """`getattr(self, "gate", None)` / `hasattr(self, "scale_p")` read one attribute of the
    module (a property getter is traced): the module's stats dict stays lazily guarded, its
    counter followed (before, getattr on the module guarded every container it holds by
    value: a recompile per call).  The program adds the gate and changes what the property
    reads between calls."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.stats = {"calls": 0, "w": 1.0}
    @property
    def scale_p(self):
        return self.stats["w"] * 2
    def forward(self, x):
        self.stats["calls"] += 1
        h = self.fc(x)
        g = getattr(self, "gate", None)
        if g is not None:
            h = g(h)
        if hasattr(self, "scale_p"):
            h = h * getattr(self, "scale_p")
        return h + self.stats["calls"]
def make():
    return M()
def mutate(i, m):
    if i == 4:
        m.gate = nn.Tanh()
    if i == 6:
        m.stats["w"] = 3.0
""", [(x,) for x in X], breaks=0)
    assert c.recompiles <= 4, c.stats.recompile_reasons
