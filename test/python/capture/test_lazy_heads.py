"""Attributes a module's forward creates lazily, on its first call (`if not hasattr(self,
"head"): self.head = nn.Linear(...)`, a Python attribute or a buffer made once): the read of
an attribute a module does not have (in its __dict__, parameters, buffers, submodules or
class) is guarded to stay missing.  Before, nothing guarded it: the variant recorded while
the head was missing (capture gave up on it: eager) kept matching after the head existed,
so the module ran eagerly for good; and a variant that creates a plain attribute was
replayed, writing it again, after the program had set it to something else."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(5)]


def test_lazily_created_head_is_captured_from_the_first_call():
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
    def forward(self, x):
        h = self.body(x)
        if not hasattr(self, "head"):
            self.head = nn.Linear(h.shape[-1], 3)
        return self.head(h)
def make():
    return M()
""", [(x,) for x in X], allow_eager=True)
    first, last = c.variants[0], c.variants[-1]
    # the first call creates the head: one graph too, the constructor a replayed call run
    # before it (module_factories.py; it ran eagerly before)
    assert not first.eager and len(first.graphs) == 1 and not first.breaks
    assert len(c.variants) == 2 and not last.eager and len(last.graphs) == 1 and not last.breaks
    assert last.hits == len(X) - 2 and first.hits == 0
    assert any("has no instance attribute 'head'" in g.describe() for g in first.pre)


def test_attribute_created_in_forward_then_changed_by_the_program():
    """A float attribute made by the first call, then set, deleted and set again between
    calls: every call agrees with eager (the variant that creates it only replays while it
    is missing)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        if not hasattr(self, "scale"):
            self.scale = 2.0
        return self.fc(x) * self.scale
def make():
    return M()
def mutate(i, m):
    if i == 2:
        m.scale = 5.0
    if i == 3:
        del m.scale
def state(m):
    return getattr(m, "scale", None)
""", [(x,) for x in X], breaks=0)


def test_getattr_default_of_a_buffer_registered_later():
    """`getattr(self, "bias_cache", None)` while no such buffer exists, then the program
    registers one: the variant that read None no longer matches."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        b = getattr(self, "bias_cache", None)
        y = self.fc(x)
        return y if b is None else y + b
def make():
    return M()
def mutate(i, m):
    if i == 2:
        m.register_buffer("bias_cache", torch.ones(8))
    if i == 4:
        m.bias_cache.fill_(3.0)
""", [(x,) for x in X], breaks=0, recompiles=1)


def test_submodule_registered_later_replaces_an_identity_path():
    """`if hasattr(self, "proj")` choosing between a submodule and the identity; the program
    adds the submodule (add_module) after two calls, then removes it again."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        y = torch.relu(self.fc(x))
        return self.proj(y) if hasattr(self, "proj") else y
def make():
    return M()
def mutate(i, m):
    if i == 2:
        torch.manual_seed(5)   # (the same weights in both copies)
        m.add_module("proj", nn.Linear(8, 8))
    if i == 4:
        del m.proj
""", [(x,) for x in X], breaks=0, recompiles=1)
